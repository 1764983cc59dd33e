"""The lean HTTP/1.1 pool against hand-written servers: chunked bodies, stale keep-alive, garbage, timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from strands_tito.providers.connection_pool import ConnectionPool, HTTPTimeout, HTTPTransportError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0)
    return await reader.readexactly(length)


def pool(port: int, timeout: float = 5.0) -> ConnectionPool:
    return ConnectionPool("127.0.0.1", port, max_connections=4, connect_timeout=1.0, timeout=timeout)


async def test_chunked_reply_and_keep_alive_reuse() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
            await writer.drain()

    server, port = await serve(handler)
    p = pool(port)
    for i in range(3):
        reply = await p.request("POST", "/generate", b'{"n":%d}' % i)
        assert reply.status == 200 and reply.content == b'{"n":%d}' % i
    assert connections == 1
    await p.aclose()
    server.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # without "Connection: close": the client only finds out on its next request

    server, port = await serve(handler)
    p = pool(port)
    assert (await p.request("GET", "/health", None)).content == b"ok"
    await asyncio.sleep(0.05)
    assert (await p.request("GET", "/health", None)).content == b"ok"
    server.close()


@pytest.mark.parametrize(
    "reply",
    [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", b"HTTP/1.1 abc OK\r\n\r\n"],
)
async def test_malformed_or_cut_replies_are_transport_errors(reply: bytes) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(reply)
        await writer.drain()
        writer.close()

    server, port = await serve(handler)
    with pytest.raises(HTTPTransportError):
        await pool(port).request("GET", "/x", None)
    server.close()


async def test_timeout_and_refused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the client gives up and closes
        writer.close()

    server, port = await serve(handler)
    with pytest.raises(HTTPTimeout, match="ReadTimeout"):
        await pool(port, timeout=0.2).request("GET", "/x", None)
    server.close()
    await server.wait_closed()
    with pytest.raises(HTTPTransportError, match="ConnectError"):
        await pool(port).request("GET", "/x", None)
