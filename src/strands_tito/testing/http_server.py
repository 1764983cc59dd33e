"""A minimal HTTP/1.1 server on :func:`asyncio.start_server`, shared by the local engine and the collector.

Supports keep-alive, ``Content-Length`` and chunked request bodies, ``Expect: 100-continue``, fixed-length and
chunked (SSE) responses, raw writes followed by a close (to fake a truncated body), detection of a client that
closes its connection while a handler is still working on the reply, and optional read timeouts for the request head
and body (a stalled client gets 408 and is closed). There is no routing or HTTP/2; TLS comes from the caller's
``ssl.SSLContext``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

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

logger = logging.getLogger(__name__)

#: Largest request body accepted; larger ones get 413 and the connection is closed.
DEFAULT_MAX_BODY = 64 * 1024 * 1024
_MAX_HEAD = 64 * 1024
_READ_SIZE = 65536


@dataclass(frozen=True)
class Request:
    """One parsed HTTP request."""

    method: str
    target: str
    path: str
    query: dict[str, str]
    version: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str, default: str | None = None) -> str | None:
        """Return a header value (case-insensitive name), or ``default``."""
        return self.headers.get(name.lower(), default)


@dataclass
class Response:
    """A complete response with a fixed-length body."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamResponse:
    """A response whose body is produced piece by piece (sent with chunked transfer encoding)."""

    chunks: AsyncIterator[bytes]
    status: int = 200
    content_type: str = "text/event-stream; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RawResponse:
    """Bytes written to the socket verbatim, after which the connection is closed."""

    data: bytes


AnyResponse = Response | StreamResponse | RawResponse


def json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None, *, allow_nan: bool = False
) -> Response:
    """Serialize ``obj`` as compact UTF-8 JSON (like orjson: no spaces, no ASCII escaping)."""
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode()
    return Response(status, body, "application/json", dict(headers or {}))


def text_response(text: str, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A ``text/plain`` response."""
    return Response(status, text.encode(), "text/plain; charset=utf-8", dict(headers or {}))


def empty_response(status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A response with an empty body."""
    return Response(status, b"", None, dict(headers or {}))


class _BadRequest(Exception):
    """The request could not be parsed; answer with ``status`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Connection:
    """One client connection, as seen by a handler.

    :attr:`disconnected` is set when the client closes its end while a handler is running (or when a write fails).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._buffer = bytearray()
        self._eof = False
        self.disconnected = asyncio.Event()
        peer = writer.get_extra_info("peername")
        self.peer: str = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)

    async def wait_disconnect(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; return True as soon as the client disconnects, False on timeout."""
        if self.disconnected.is_set():
            return True
        try:
            await asyncio.wait_for(self.disconnected.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # -- reading ------------------------------------------------------------------------------------------------

    async def _fill(self) -> bool:
        if self._eof:
            return False
        data = await self._reader.read(_READ_SIZE)
        if not data:
            self._eof = True
            return False
        self._buffer += data
        return True

    async def _read_until(self, marker: bytes, limit: int, status: int) -> bytes | None:
        start = 0
        while True:
            index = self._buffer.find(marker, start)
            if index >= 0:
                end = index + len(marker)
                data = bytes(self._buffer[:end])
                del self._buffer[:end]
                return data
            if len(self._buffer) > limit:
                raise _BadRequest(status, "request head too large")
            start = max(0, len(self._buffer) - len(marker) + 1)
            if not await self._fill():
                if self._buffer:
                    raise _BadRequest(400, "connection closed mid-request")
                return None

    async def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            if not await self._fill():
                raise _BadRequest(400, "connection closed mid-body")
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def _read_chunked(self, max_body: int) -> bytes:
        body = bytearray()
        while True:
            line = await self._read_until(b"\r\n", 4096, 400)
            if line is None:
                raise _BadRequest(400, "connection closed mid-body")
            size_text = line[:-2].split(b";", 1)[0].strip()
            # Only hex digits: int() would also take a sign, underscores or a 0x prefix.
            if not size_text or size_text.strip(b"0123456789abcdefABCDEF"):
                raise _BadRequest(400, "bad chunk size")
            size = int(size_text, 16)
            if size == 0:
                while True:  # trailers, ignored
                    trailer = await self._read_until(b"\r\n", _MAX_HEAD, 431)
                    if trailer is None or trailer == b"\r\n":
                        return bytes(body)
            if len(body) + size > max_body:
                raise _BadRequest(413, "request body too large")
            body += await self._read_exactly(size)
            if await self._read_exactly(2) != b"\r\n":
                raise _BadRequest(400, "bad chunk terminator")

    async def read_request(
        self, max_body: int, head_timeout: float | None = None, body_timeout: float | None = None
    ) -> Request | None:
        """Read the next request; None when the client closed the connection (or stayed silent) between requests.

        ``head_timeout`` bounds the wait for a whole request head (an idle keep-alive connection is closed quietly,
        a half-sent head gets 408); ``body_timeout`` bounds the body (408).
        """
        try:
            async with asyncio.timeout(head_timeout):
                head = await self._read_until(b"\r\n\r\n", _MAX_HEAD, 431)
        except TimeoutError:
            if not self._buffer:
                return None
            raise _BadRequest(408, "request head not received in time") from None
        if head is None:
            return None
        method, target, version, headers = _parse_head(head)
        try:
            async with asyncio.timeout(body_timeout):
                body = await self._read_body(headers, max_body)
        except TimeoutError:
            raise _BadRequest(408, "request body not received in time") from None
        split = urlsplit(target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        return Request(method, target, split.path or "/", query, version, headers, body)

    async def _read_body(self, headers: Mapping[str, str], max_body: int) -> bytes:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await self._maybe_continue(headers)
            return await self._read_chunked(max_body)
        length_text = headers.get("content-length", "0")
        # ASCII digits only: str.isdigit() also accepts digits int() cannot read (superscripts) or reads (Arabic).
        if not (length_text.isascii() and length_text.isdigit()):
            raise _BadRequest(400, "bad content-length")
        length = int(length_text)
        if length > max_body:
            raise _BadRequest(413, "request body too large")
        if length:
            await self._maybe_continue(headers)
        return await self._read_exactly(length)

    async def _maybe_continue(self, headers: Mapping[str, str]) -> None:
        if headers.get("expect", "").lower() == "100-continue":
            self._writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await self._writer.drain()

    async def watch(self) -> None:
        """Read ahead while a handler runs, so that a client close is noticed (pipelined bytes are kept)."""
        try:
            while len(self._buffer) <= _MAX_HEAD + DEFAULT_MAX_BODY:
                if not await self._fill():
                    self.disconnected.set()
                    return
        except (ConnectionError, OSError):
            self.disconnected.set()

    # -- writing ------------------------------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Write and drain; marks the connection disconnected (and re-raises) if the peer is gone."""
        try:
            self._writer.write(data)
            await self._writer.drain()
        except (ConnectionError, OSError):
            self.disconnected.set()
            raise

    async def linger(self, timeout: float = 2.0) -> None:
        """Half-close and discard what the client still sends, so that it reads our error instead of a reset."""
        with contextlib.suppress(Exception):
            if self._writer.can_write_eof():
                self._writer.write_eof()
            async with asyncio.timeout(timeout):
                while await self._reader.read(_READ_SIZE):
                    pass

    def close(self) -> None:
        """Close the transport."""
        with contextlib.suppress(Exception):
            self._writer.close()


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """Request line and headers (lower-case names) of a request head."""
    lines = head[:-4].decode("latin-1").split("\r\n")
    while lines and not lines[0]:
        lines.pop(0)  # tolerate stray CRLFs between requests (RFC 9112 §2.2)
    if not lines:
        raise _BadRequest(400, "empty request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(400, "bad request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest(400, "bad header line")
        headers[name.lower()] = value.strip()
    return method, target, version, headers


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


Handler = Callable[[Request, Connection], Awaitable[AnyResponse]]


class HttpServer:
    """Serve ``handler`` over HTTP/1.1.

    The handler gets the parsed :class:`Request` and the :class:`Connection` (to notice a client going away) and
    returns a :class:`Response`, :class:`StreamResponse` or :class:`RawResponse`.  An exception in the handler
    becomes a plain 500.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        server_name: str = "strands-tito",
        head_timeout: float | None = None,
        body_timeout: float | None = None,
    ) -> None:
        self._handler = handler
        self._max_body = max_body
        self._head_timeout = head_timeout
        self._body_timeout = body_timeout
        self._server_name = server_name
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.host = ""
        self.port = 0

    async def start(self, host: str, port: int, ssl: Any = None) -> tuple[str, int]:
        """Start listening (TLS when ``ssl`` is an ``ssl.SSLContext``); returns the bound ``(host, port)``.

        Raises:
            OSError: the address cannot be bound (in use, not local, no permission).
        """
        self._server = await asyncio.start_server(self._on_client, host, port, ssl=ssl)
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = str(sockname[0]), int(sockname[1])
        return self.host, self.port

    async def close(self) -> None:
        """Stop listening and drop every open connection."""
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

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        conn = Connection(reader, writer)
        try:
            await self._serve(conn)
        except (ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            conn.close()
            if task is not None:
                self._tasks.discard(task)

    def _base_headers(self, keep_alive: bool) -> dict[str, str]:
        headers = {"date": email.utils.formatdate(usegmt=True), "server": self._server_name}
        if not keep_alive:
            headers["connection"] = "close"
        return headers

    async def _serve(self, conn: Connection) -> None:
        while True:
            try:
                request = await conn.read_request(self._max_body, self._head_timeout, self._body_timeout)
            except _BadRequest as exc:
                body = json.dumps({"detail": str(exc)}).encode()
                headers = self._base_headers(False)
                headers.update({"content-type": "application/json", "content-length": str(len(body))})
                await conn.write(_head(exc.status, headers) + body)
                await conn.linger()
                return
            if request is None:
                return
            connection_header = request.headers.get("connection", "").lower()
            if request.version == "HTTP/1.0":
                keep_alive = "keep-alive" in connection_header
            else:
                keep_alive = "close" not in connection_header

            watcher = asyncio.create_task(conn.watch())
            try:
                try:
                    response = await self._handler(request, conn)
                except Exception:
                    logger.exception("handler failed for %s %s", request.method, request.target)
                    response = text_response("Internal Server Error", 500)
                keep_alive = await self._send(conn, request, response, keep_alive) and keep_alive
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if not keep_alive or conn.disconnected.is_set():
                return

    async def _send(self, conn: Connection, request: Request, response: AnyResponse, keep_alive: bool) -> bool:
        """Write ``response``; return False when the connection must be closed afterwards."""
        if isinstance(response, RawResponse):
            await conn.write(response.data)
            return False
        if isinstance(response, StreamResponse):
            return await self._send_stream(conn, request, response, keep_alive)
        headers = self._base_headers(keep_alive)
        if response.content_type is not None:
            headers["content-type"] = response.content_type
        headers["content-length"] = str(len(response.body))
        headers.update(response.headers)
        body = b"" if request.method == "HEAD" else response.body
        await conn.write(_head(response.status, headers) + body)
        return True

    async def _send_stream(
        self, conn: Connection, request: Request, response: StreamResponse, keep_alive: bool
    ) -> bool:
        chunked = request.version != "HTTP/1.0"
        headers = self._base_headers(keep_alive and chunked)
        headers["content-type"] = response.content_type
        headers["cache-control"] = "no-cache"
        if chunked:
            headers["transfer-encoding"] = "chunked"
        headers.update(response.headers)
        chunks = response.chunks
        try:
            await conn.write(_head(response.status, headers))
            async for chunk in chunks:
                if not chunk:
                    continue
                await conn.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                await conn.write(b"0\r\n\r\n")
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        return chunked
