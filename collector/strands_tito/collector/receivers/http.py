"""OTLP/HTTP receiver: ``POST /v1/traces``, and the collector's ``/health`` and ``/metrics``.

HTTP/1.1 framing is h11's (a maintained, RFC 9112 parser; the numbers that chose it are in BENCHMARKS.md); this
module adds only what h11 leaves to the server, in the order a request arrives:

- connections are bounded (``max_connections``): one more gets ``503`` with ``Retry-After`` and is closed at once,
  and a burst of refusals is logged as one line when it starts and one when it ends, not a line per socket;
- the request head must arrive within ``head_timeout`` (an idle keep-alive connection is closed quietly, a half-sent
  head gets 408) and is at most 64 KiB;
- the bearer token and the declared length are checked on the head, *before* the body is read: a wrong token is
  ``401`` and a declared body over ``max_body`` is ``413``, both without reading it; a chunked body is counted as it
  arrives and cut at ``max_body``; a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
  (``400``; RFC 9112 §6.3 allows rejecting it, and it is a request-smuggling vector behind a proxy);
- the body must arrive within ``body_timeout`` (408).

Every error answer closes the connection after it is written. Answers follow the OTLP/HTTP spec: 200 with an
``ExportTraceServiceResponse`` (partial success when spans were refused), errors as a ``google.rpc.Status`` in the
request's encoding, 503 with ``Retry-After`` when busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import ssl
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import h11
from google.protobuf import json_format
from google.rpc import status_pb2

from ..accept import GRPC_STATUS, HTTP_STATUS, JSON, AcceptPath, Outcome, Submission, Verdict

logger = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
READ_SIZE = 65536
SERVER = "strands-tito-collector"


class _Refuse(Exception):
    """Answer ``status`` with ``detail`` and close the connection."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.headers = headers or {}


class HttpReceiver:
    """Serves OTLP/HTTP through the shared accept path.

    Args:
        accept: The shared accept path.
        health: Returns the ``/health`` body (``status`` is ``ok`` or ``degraded``).
        metrics: Returns the ``/metrics`` text.
        max_body: Largest body read off the socket (larger: 413 before reading it).
        head_timeout: Seconds for a request head to arrive.
        body_timeout: Seconds for a request body to arrive.
        max_connections: Connections served at once; more are answered 503 and closed.
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
        max_connections: int = 256,
    ) -> None:
        self.accept = accept
        self._health = health
        self._metrics = metrics
        self.max_body = max_body
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refused = 0  # connections refused in the current burst
        self.port = 0

    async def start(self, host: str, port: int, context: ssl.SSLContext | None) -> int:
        """Listen; returns the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        self._server = await asyncio.start_server(self._on_client, host, port, ssl=context, limit=READ_SIZE)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.wait_closed()

    # -- connections -------------------------------------------------------------------------------------------------

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) >= self.max_connections:
            self._refuse_connection(writer)
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
            if self._refused and len(self._tasks) < self.max_connections:
                logger.warning("refused=<%d> | connection burst over; accepting connections again", self._refused)
                self._refused = 0

    def _refuse_connection(self, writer: asyncio.StreamWriter) -> None:
        self._refused += 1
        self.accept.metrics.count_request("http", "too_many_connections")
        if self._refused == 1:
            logger.warning(
                "max_connections=<%d> | connection limit reached; new connections get 503 until some close",
                self.max_connections,
            )
        with contextlib.suppress(Exception):
            writer.write(_raw_answer(503, "too many connections", {"retry-after": "1"}))
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            try:
                status, body, content_type, headers = await self._exchange(conn, reader, writer)
            except _Refuse as refusal:
                writer.write(_raw_answer(refusal.status, str(refusal), refusal.headers))
                await writer.drain()
                await _linger(reader, writer)
                return
            except _Idle:
                return
            writer.write(
                conn.send(h11.Response(status_code=status, headers=_headers(content_type, len(body), headers)))
                + conn.send(h11.Data(data=body))
                + conn.send(h11.EndOfMessage())
            )
            await writer.drain()
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # h11 says the connection cannot be reused (Connection: close, HTTP/1.0)
            conn.start_next_cycle()

    async def _exchange(  # noqa: C901  one request's checks in the order the protocol reads it
        self, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, bytes, str, dict[str, str]]:
        """Read one request and answer it: ``(status, body, content type, extra headers)``."""
        try:
            async with asyncio.timeout(self.head_timeout):
                event = await _next_event(conn, reader)
        except TimeoutError:
            if conn.their_state is h11.IDLE and not conn.trailing_data[0]:
                raise _Idle from None
            raise _Refuse(408, "request head not received in time") from None
        if isinstance(event, h11.ConnectionClosed):
            raise _Idle
        assert isinstance(event, h11.Request)
        request_headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
        path = event.target.split(b"?", 1)[0]
        if path in (b"/health", b"/metrics"):
            await self._read_body(conn, reader, 0)  # none expected; keeps the connection in step
            if path == b"/health":
                return 200, json.dumps(self._health()).encode(), JSON, {}
            return 200, self._metrics().encode(), "text/plain; charset=utf-8", {}
        if path != b"/v1/traces":
            raise _Refuse(404, "Not Found")
        if event.method != b"POST":
            raise _Refuse(405, "Method Not Allowed", {"allow": "POST"})
        if "transfer-encoding" in request_headers and "content-length" in request_headers:
            raise _Refuse(400, "both Content-Length and Transfer-Encoding")
        declared = request_headers.get("content-length")
        if declared is not None and int(declared) > self.max_body:
            self.accept.metrics.count_request("http", Verdict.TOO_LARGE.value)
            raise _Refuse(413, f"body exceeds {self.max_body} bytes")
        if not self.accept.authorized(request_headers.get("authorization")):
            self.accept.metrics.count_request("http", Verdict.UNAUTHENTICATED.value)
            raise _Refuse(401, "missing or wrong bearer token")
        if conn.they_are_waiting_for_100_continue:
            writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await self._read_body(conn, reader, self.max_body)
        except TimeoutError:
            raise _Refuse(408, "request body not received in time") from None
        submission = Submission(
            "http",
            body,
            authorization=request_headers.get("authorization"),
            content_type=request_headers.get("content-type", ""),
            content_encoding=request_headers.get("content-encoding", ""),
        )
        outcome = await self.accept.accept(submission)
        as_json = submission.content_type.split(";")[0].strip().lower() == JSON
        return _answer(outcome, as_json)

    async def _read_body(self, conn: h11.Connection, reader: asyncio.StreamReader, limit: int) -> bytes:
        body = bytearray()
        while True:
            event = await _next_event(conn, reader)
            if isinstance(event, h11.Data):
                body += event.data
                if len(body) > limit:
                    self.accept.metrics.count_request("http", Verdict.TOO_LARGE.value)
                    raise _Refuse(413, f"body exceeds {limit} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return bytes(body)
            else:  # ConnectionClosed mid-body
                raise _Refuse(400, "connection closed mid-body")


class _Idle(Exception):
    """The client closed the connection, or left it idle, between requests."""


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    """The next h11 event, reading as needed; a framing error is answered with h11's status hint."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as e:
            raise _Refuse(e.error_status_hint, str(e)) from None
        if event is not h11.NEED_DATA:
            return event
        data = await reader.read(READ_SIZE)
        if not data and conn.their_state is h11.SEND_BODY:
            raise _Refuse(400, "connection closed mid-body")
        conn.receive_data(data)


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float = 2.0) -> None:
    """Half-close and discard what the client still sends, so that it reads our answer instead of a reset."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(timeout):
            while await reader.read(READ_SIZE):
                pass


def _headers(content_type: str, length: int, extra: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("date", email.utils.formatdate(usegmt=True)),
        ("server", SERVER),
        ("content-type", content_type),
        ("content-length", str(length)),
        *extra.items(),
    ]


def _raw_answer(status: int, detail: str, extra: dict[str, str]) -> bytes:
    """An error answer that closes the connection, written without h11 (its state may be an error state)."""
    body = json.dumps({"detail": detail[:1000]}).encode()
    head = [f"HTTP/1.1 {status} {_reason(status)}", *(f"{k}: {v}" for k, v in _headers(JSON, len(body), extra))]
    head.append("connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _answer(outcome: Outcome, as_json: bool) -> tuple[int, bytes, str, dict[str, str]]:
    status = HTTP_STATUS[outcome.verdict]
    if outcome.verdict is Verdict.OK:
        response = outcome.response()
        if as_json:
            return 200, json.dumps(json_format.MessageToDict(response)).encode(), JSON, {}
        return 200, response.SerializeToString(), "application/x-protobuf", {}
    headers = {"retry-after": str(outcome.retry_after)} if outcome.retry_after is not None else {}
    code = GRPC_STATUS[outcome.verdict].value[0]
    if as_json:
        return status, json.dumps({"code": code, "message": outcome.message}).encode(), JSON, headers
    body_pb = status_pb2.Status(code=code, message=outcome.message).SerializeToString()
    return status, body_pb, "application/x-protobuf", headers
