"""A small HTTP/1.1 keep-alive connection pool on asyncio streams: the hot path of ``/generate``.

Every turn of an agent sends the whole trajectory as JSON token IDs and waits for a short reply; general-purpose
clients spend more CPU in their own layers than the request itself costs (see BENCHMARKS.md). This pool does only
what that exchange needs: plain ``http://``, ``Content-Length`` or chunked response bodies, keep-alive, timeouts,
and closing the connection when a request is cancelled (which makes SGLang abort the generation). Anything else
(TLS, proxies) goes through httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from strands_tito.errors import StrandsTitoError


class HTTPTransportError(StrandsTitoError):
    """The connection failed or broke, or the reply was not valid HTTP/1.1."""


class HTTPTimeout(HTTPTransportError):
    """No (complete) reply within the timeout."""


class HTTPConnectError(HTTPTransportError):
    """No connection could be opened (refused, no route): nothing is listening there."""


@dataclass(frozen=True)
class HTTPReply:
    """Status, headers (lower-case names) and body of one response."""

    status: int
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (invalid bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class ConnectionPool:
    """Keep-alive connections to one ``host:port``, at most ``max_connections`` at a time.

    Bound to the event loop it is first used on (like any asyncio object); create one per loop.
    """

    def __init__(
        self, host: str, port: int, *, max_connections: int, connect_timeout: float, timeout: float | None
    ) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def request(
        self, method: str, path: str, body: bytes | None, content_type: str = "application/json"
    ) -> HTTPReply:
        """Send one request and read the whole reply.

        Raises:
            HTTPTimeout: connect or reply timeout.
            HTTPTransportError: refused, reset or cut-off connection, or a malformed reply.
        """
        head = [f"{method} {path} HTTP/1.1\r\n".encode(), self._host_header, b"Accept: application/json\r\n"]
        if body is not None:
            head.append(f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode())
        data = b"".join(head) + b"\r\n" + (body or b"")
        async with self._slots:
            while self._idle:
                connection = self._idle.pop()
                try:
                    return await self._exchange(connection, data)
                except _StaleConnection:
                    continue  # the server closed this idle connection; nothing was processed, so try another
            connection = await self._connect()
            try:
                return await self._exchange(connection, data)
            except _StaleConnection as e:
                raise HTTPTransportError("server closed the connection without replying") from e

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.connect_timeout
            )
        except TimeoutError as e:
            raise HTTPTimeout(
                f"ConnectTimeout: no connection to {self.host}:{self.port} in {self.connect_timeout}s"
            ) from e
        except OSError as e:
            raise HTTPConnectError(f"ConnectError: {self.host}:{self.port}: {e}") from e
        return _Connection(reader, writer)

    async def _exchange(self, connection: _Connection, data: bytes) -> HTTPReply:
        keep = False
        try:
            connection.writer.write(data)
            await connection.writer.drain()
            reply, keep = await asyncio.wait_for(_read_reply(connection.reader), self.timeout)
            return reply
        except TimeoutError as e:
            raise HTTPTimeout(f"ReadTimeout: no complete reply in {self.timeout}s") from e
        except _StaleConnection:
            raise
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            raise HTTPTransportError(f"{type(e).__name__}: {e}") from e
        finally:
            # Cancelled, failed or told to close: drop the connection (a cancelled request's server sees it go).
            if keep:
                self._idle.append(connection)
            else:
                connection.close()

    async def aclose(self) -> None:
        """Close idle connections."""
        while self._idle:
            self._idle.pop().close()


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any byte of the reply."""


async def _read_reply(reader: asyncio.StreamReader) -> tuple[HTTPReply, bool]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise _StaleConnection() from e
        raise
    lines = head[:-4].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(rest.split(" ", 1)[0])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are expected; the final CRLF
                break
            parts.append(await reader.readexactly(size))
            await reader.readexactly(2)
        content = b"".join(parts)
    elif "content-length" in headers:
        content = await reader.readexactly(int(headers["content-length"]))
    elif status in (204, 304) or 100 <= status < 200:
        content = b""
    else:
        content = await reader.read()  # delimited by the server closing the connection
        keep = False
    return HTTPReply(status, headers, content), keep
