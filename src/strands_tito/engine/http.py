"""The engine's HTTP/1.1 server: the neutral :mod:`strands_tito.http_server`, which the collector shares."""

from strands_tito.http_server import (
    DEFAULT_MAX_BODY,
    AnyResponse,
    Connection,
    Handler,
    HttpServer,
    RawResponse,
    Request,
    Response,
    StreamResponse,
    empty_response,
    json_response,
    text_response,
)

__all__ = [
    "DEFAULT_MAX_BODY",
    "AnyResponse",
    "Connection",
    "Handler",
    "HttpServer",
    "RawResponse",
    "Request",
    "Response",
    "StreamResponse",
    "empty_response",
    "json_response",
    "text_response",
]
