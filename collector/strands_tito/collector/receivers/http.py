"""OTLP/HTTP receiver: ``POST /v1/traces``, and the collector's ``/health`` and ``/metrics``.

Answers follow the OTLP/HTTP spec: 200 with an ``ExportTraceServiceResponse`` (partial success when spans were
refused), errors as a ``google.rpc.Status`` in the request's encoding, 503 with ``Retry-After`` when busy. Stalled
clients are bounded by the server's head and body read timeouts (408, then close).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2

from strands_tito.http_server import Connection, HttpServer, Request, Response, json_response, text_response

from ..accept import GRPC_STATUS, HTTP_STATUS, JSON, AcceptPath, Outcome, Submission, Verdict


class HttpReceiver:
    """Serves OTLP/HTTP through the shared accept path.

    Args:
        accept: The shared accept path.
        health: Returns the ``/health`` body (``status`` is ``ok`` or ``degraded``).
        metrics: Returns the ``/metrics`` text.
        max_body: Largest body read off the socket (larger: 413 before reading it).
        head_timeout: Seconds for a request head to arrive.
        body_timeout: Seconds for a request body to arrive.
    """

    def __init__(
        self,
        accept: AcceptPath,
        health: Callable[[], dict[str, Any]],
        metrics: Callable[[], str],
        *,
        max_body: int,
        head_timeout: float,
        body_timeout: float,
    ) -> None:
        self.accept = accept
        self._health = health
        self._metrics = metrics
        self._server = HttpServer(
            self._handle,
            max_body=max_body,
            server_name="strands-tito-collector",
            head_timeout=head_timeout,
            body_timeout=body_timeout,
        )
        self.port = 0

    async def start(self, host: str, port: int, context: ssl.SSLContext | None) -> int:
        """Listen; returns the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        _, self.port = await self._server.start(host, port, ssl=context)
        return self.port

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        await self._server.close()

    async def _handle(self, request: Request, connection: Connection) -> Response:
        if request.path == "/health":
            return json_response(self._health())
        if request.path == "/metrics":
            return text_response(self._metrics())
        if request.path != "/v1/traces":
            return json_response({"detail": "Not Found"}, 404)
        if request.method != "POST":
            return json_response({"detail": "Method Not Allowed"}, 405, {"allow": "POST"})
        submission = Submission(
            "http",
            request.body,
            authorization=request.header("authorization"),
            content_type=request.header("content-type") or "",
            content_encoding=request.header("content-encoding") or "",
        )
        outcome = await self.accept.accept(submission)
        as_json = submission.content_type.split(";")[0].strip().lower() == JSON
        return _answer(outcome, as_json)


def _answer(outcome: Outcome, as_json: bool) -> Response:
    status = HTTP_STATUS[outcome.verdict]
    if outcome.verdict is Verdict.OK:
        response = outcome.response()
        if as_json:
            body = json_format.MessageToDict(response)  # partialSuccess only when spans were refused
            return Response(200, json.dumps(body).encode(), JSON)
        return Response(200, response.SerializeToString(), "application/x-protobuf")
    headers = {"retry-after": str(outcome.retry_after)} if outcome.retry_after is not None else {}
    code = GRPC_STATUS[outcome.verdict].value[0]
    if as_json:
        return Response(status, json.dumps({"code": code, "message": outcome.message}).encode(), JSON, headers)
    body_pb = status_pb2.Status(code=code, message=outcome.message).SerializeToString()
    return Response(status, body_pb, "application/x-protobuf", headers)
