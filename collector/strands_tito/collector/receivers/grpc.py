"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

The method is registered with no request deserializer, so the body reaches the shared accept path as bytes and a
body that does not decode is ``INVALID_ARGUMENT`` with the reason (as HTTP's 400), never ``UNKNOWN``. Message size is
bounded by ``grpc.max_receive_message_length`` (the gRPC library answers ``RESOURCE_EXHAUSTED``); stalled or idle
connections by HTTP/2 keepalive and ``grpc.max_connection_idle_ms`` (see :data:`server_options`).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc

from ..accept import GRPC_STATUS, AcceptPath, Submission, Verdict

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def server_options(max_message: int, idle_timeout_s: float) -> list[tuple[str, int]]:
    """gRPC server options: message size, and closing connections that stay idle or stop answering pings."""
    return [
        ("grpc.max_receive_message_length", max_message),
        ("grpc.max_send_message_length", max_message),
        ("grpc.max_connection_idle_ms", int(idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


class GrpcReceiver:
    """Serves OTLP/gRPC through the shared accept path."""

    def __init__(self, accept: AcceptPath, max_message: int, idle_timeout_s: float) -> None:
        self.accept = accept
        self._server = grpc.aio.server(options=server_options(max_message, idle_timeout_s))
        handler = grpc.unary_unary_rpc_method_handler(self._export)  # bytes in, bytes out
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        self.port: int | None = None

    async def start(self, address: str, context: ssl.SSLContext | None, tls: tuple[Path, Path] | None = None) -> int:
        """Listen on ``host:port``; returns the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        try:
            if context is not None and tls is not None:
                cert, key = tls
                credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
                port = self._server.add_secure_port(address, credentials)
            else:
                port = self._server.add_insecure_port(address)
        except RuntimeError as e:  # grpc reports a failed bind this way
            raise OSError(f"cannot bind {address}: {e}") from e
        if not port:
            raise OSError(f"cannot bind {address}")
        await self._server.start()
        self.port = int(port)
        return self.port

    async def close(self, grace: float) -> None:
        """Stop; calls in progress get ``grace`` seconds."""
        await self._server.stop(grace)

    async def _export(self, body: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        metadata = {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        outcome = await self.accept.accept(Submission("grpc", body, authorization=metadata.get("authorization")))
        if outcome.verdict is not Verdict.OK:
            await context.abort(GRPC_STATUS[outcome.verdict], outcome.message or outcome.verdict.value)
        body_out: bytes = outcome.response().SerializeToString()
        return body_out
