"""OTLP/HTTP receiver: ``POST /v1/traces``, and the collector's ``/health`` and ``/metrics``.

HTTP/1.1 framing is h11's (a maintained, RFC 9112 parser; the numbers that chose it are in BENCHMARKS.md); this
module adds only what h11 leaves to the server, in the order a request arrives:

- connections are admitted by :class:`HttpReceiver` (``max_connections``, ``max_connections_per_peer``): when the
  table is full the keep-alive connection idle longest, else the oldest unfinished head, makes room with a ``503``;
  a burst of displaced connections is logged as one line when it starts and one when it ends, not a line per socket;
- a new connection's request head must arrive within ``head_timeout``, a keep-alive connection's next request start
  within ``keepalive_timeout`` and its head within ``head_timeout`` of its first byte (a connection that sent nothing
  is closed quietly, a half-sent head gets 408); a head is at most 64 KiB;
- requests past their head are bounded (``max_requests``): one more is ``503`` on its head;
- the bearer token and the declared length are checked on the head, *before* the body is read: a wrong token is
  ``401`` and a declared body over ``max_body`` is ``413``, both without reading it; a chunked body is counted as it
  arrives and cut at ``max_body``; a request with both ``Content-Length`` and ``Transfer-Encoding`` is refused
  (``400``; RFC 9112 §6.3 allows rejecting it, and it is a request-smuggling vector behind a proxy);
- the body must arrive within ``body_timeout`` (408).

Every error answer closes the connection after it is written, and what the client still sends is read and
discarded for a moment, so that it reads the answer rather than a reset. Answers follow the OTLP/HTTP spec: 200 with an
``ExportTraceServiceResponse`` (partial success when spans were refused), errors as a ``google.rpc.Status`` in the
request's encoding, 503 with ``Retry-After`` when busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import enum
import json
import logging
import ssl
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import h11
from google.protobuf import json_format
from google.rpc import status_pb2

from ..accept import GRPC_STATUS, HTTP_STATUS, JSON, AcceptPath, Outcome, Submission, Verdict, retry_after

logger = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
READ_SIZE = 65536
SERVER = "strands-tito-collector"
BACKLOG = 4096
"""Connections the kernel queues before the server accepts them (Linux caps it at ``net.core.somaxconn``): a burst
of agents waits there instead of having its connection attempts dropped."""
OUTSIDE_HEAD_TIMEOUT = 1.0
"""Seconds a connection answered outside the table gets to send its head (to tell ``/health`` from the rest)."""


class _Refuse(Exception):
    """Answer ``status`` with ``detail`` and close the connection."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.headers = headers or {}


class _State(enum.Enum):
    IDLE = "idle"  # a keep-alive connection between requests
    HEAD = "head"  # a request head on its way (a new connection's included, before its first byte)
    BUSY = "busy"  # a request past its head: its body, its processing, its answer
    GONE = "gone"  # out of the table: closing, or answered outside it


class _Connection:
    """A connection's place in the table (:class:`HttpReceiver`'s admission)."""

    __slots__ = ("evicted", "peer", "state", "task")

    def __init__(self, peer: str, task: asyncio.Task[Any]) -> None:
        self.peer = peer
        self.task = task
        self.state = _State.GONE
        self.evicted = False


class HttpReceiver:
    """Serves OTLP/HTTP through the shared accept path.

    Admission: up to ``max_connections`` connections are held; when the table is full, a new connection takes the
    place of the keep-alive connection idle longest, else of the one whose request head has been arriving longest
    (a connection that sent nothing since it opened included); the connection it takes is answered ``503`` with
    ``Retry-After`` (a request that raced in gets that answer) and closed. Requests past their head are bounded by
    ``max_requests`` (below ``max_connections``, so the table always holds a connection a newcomer can take); past
    it a request is answered ``503`` with ``Retry-After`` on its head, its body read and discarded. A connection
    that finds no place (or whose peer already holds ``max_connections_per_peer``) is answered outside the table:
    its head is read for at most a second, ``/health`` and ``/metrics`` are served, anything else gets ``503`` (or
    ``429``) with ``Retry-After``. Every refusal is an answer, written before the connection is half-closed and
    what the client still sends is discarded, so that it is never a reset.

    Args:
        accept: The shared accept path.
        health: Returns the ``/health`` body (``status`` is ``ok`` or ``degraded``).
        metrics: Returns the ``/metrics`` text.
        max_body: Largest body read off the socket (larger: 413 before reading it).
        head_timeout: Seconds for a request head to arrive (from the connection's accept, or from the first byte of
            a later request).
        body_timeout: Seconds for a request body to arrive, and for the client to read the answer.
        max_connections: Connections held at once.
        max_requests: Requests past their head at once.
        keepalive_timeout: Seconds a connection may stay idle between requests.
        max_connections_per_peer: Connections one address may hold (0: no bound); past it, ``429``.
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
        max_requests: int = 64,
        keepalive_timeout: float = 30.0,
        max_connections_per_peer: int = 0,
    ) -> None:
        self.accept = accept
        self._health = health
        self._metrics = metrics
        self.max_body = max_body
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.keepalive_timeout = keepalive_timeout
        self.max_connections = max_connections
        self._max_requests = max_requests
        self.max_connections_per_peer = max_connections_per_peer
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # The table, oldest first in each dict: insertion order is the order of eviction.
        self._idle: dict[_Connection, None] = {}
        self._heads: dict[_Connection, None] = {}
        self._busy = 0
        self._per_peer: dict[str, int] = {}
        self._displaced = 0  # connections evicted or answered outside the table in the current burst
        self.port = 0

    @property
    def max_requests(self) -> int:
        """Requests past their head at once: ``max_requests``, kept below ``max_connections``."""
        return max(1, min(self._max_requests, self.max_connections - 1))

    @property
    def connections(self) -> int:
        """Connections in the table now."""
        return len(self._idle) + len(self._heads) + self._busy

    async def start(self, host: str, port: int, context: ssl.SSLContext | None) -> int:
        """Listen; returns the bound port.

        Raises:
            OSError: the address cannot be bound.
        """
        self._server = await asyncio.start_server(
            self._on_client, host, port, ssl=context, limit=READ_SIZE, backlog=BACKLOG
        )
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

    # -- admission ---------------------------------------------------------------------------------------------------

    def _move(self, conn: _Connection, state: _State) -> None:
        """Put ``conn`` at the young end of ``state``'s place in the table."""
        if conn.state is _State.IDLE:
            del self._idle[conn]
        elif conn.state is _State.HEAD:
            del self._heads[conn]
        elif conn.state is _State.BUSY:
            self._busy -= 1
        conn.state = state
        if state is _State.IDLE:
            self._idle[conn] = None
        elif state is _State.HEAD:
            self._heads[conn] = None
        elif state is _State.BUSY:
            self._busy += 1

    def _admit(self, conn: _Connection) -> bool:
        """Give ``conn`` a place, evicting the keep-alive connection idle longest or else the oldest unfinished head
        (a new connection that sent nothing is one)."""
        if self.connections >= self.max_connections:
            victim = next(iter(self._idle), None) or next(iter(self._heads), None)
            if victim is None:
                return False
            self._note_displaced("evicted_idle" if victim.state is _State.IDLE else "evicted_head")
            self._move(victim, _State.GONE)
            victim.evicted = True
            victim.task.cancel()
        self._move(conn, _State.HEAD)  # a new connection is a head not begun: the youngest of them
        return True

    def _note_displaced(self, outcome: str) -> None:
        self._displaced += 1
        self.accept.metrics.count_request("http", outcome)
        if self._displaced == 1:
            logger.warning(
                "max_connections=<%d> | connection limit reached; idle connections and slow heads are closed "
                "first, new connections that find no place are answered 503",
                self.max_connections,
            )

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        conn = _Connection(str(peername[0]) if isinstance(peername, tuple) else "", task)
        self._tasks.add(task)
        peers = self._per_peer.get(conn.peer, 0)
        try:
            if self.max_connections_per_peer and peers >= self.max_connections_per_peer:
                self.accept.metrics.count_request("http", "too_many_from_peer")
                await self._answer_outside(reader, writer, 429, f"{peers} connections from {conn.peer}")
                return
            self._per_peer[conn.peer] = peers + 1
            try:
                if not self._admit(conn):
                    self._note_displaced("too_many_connections")
                    await self._answer_outside(reader, writer, 503, "too many connections")
                    return
                await self._serve(conn, reader, writer)
            finally:
                self._move(conn, _State.GONE)
                left = self._per_peer.pop(conn.peer) - 1
                if left:
                    self._per_peer[conn.peer] = left
        except asyncio.CancelledError:
            if not conn.evicted:
                return  # the receiver is closing
            task.uncancel()
            await _refuse(
                reader, writer, 503, "connection closed to make room; retry", {"retry-after": str(retry_after())}
            )
        except (ConnectionError, OSError):
            pass
        finally:
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
            if self._displaced and self.connections < self.max_connections:
                logger.warning("displaced=<%d> | connection burst over; all connections have a place", self._displaced)
                self._displaced = 0

    async def _answer_outside(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, why: str
    ) -> None:
        """Answer a connection that has no place: ``/health`` and ``/metrics`` as usual, anything else ``status`` with
        ``Retry-After``; the head gets at most :data:`OUTSIDE_HEAD_TIMEOUT` seconds."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        event: Any = None
        with contextlib.suppress(TimeoutError, _Refuse):
            async with asyncio.timeout(min(OUTSIDE_HEAD_TIMEOUT, self.head_timeout)):
                event = await _next_event(conn, reader)
        if isinstance(event, h11.Request) and event.method == b"GET" and event.target in (b"/health", b"/metrics"):
            body, content_type = self._report(event.target)
            writer.write(_raw_answer(200, "", {}, body, content_type))
            await _linger(reader, writer)
            return
        await _refuse(reader, writer, status, f"collector busy: {why}; retry", {"retry-after": str(retry_after())})

    def _report(self, path: bytes) -> tuple[bytes, str]:
        if path == b"/health":
            return json.dumps(self._health()).encode(), JSON
        return self._metrics().encode(), "text/plain; charset=utf-8"

    # -- connections -------------------------------------------------------------------------------------------------

    async def _serve(self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        kept = False
        while True:
            try:
                status, body, content_type, headers = await self._exchange(conn, http, reader, writer, kept)
            except _Refuse as refusal:
                self._move(conn, _State.GONE)
                await _refuse(reader, writer, refusal.status, str(refusal), refusal.headers)
                return
            except _Idle:
                return
            writer.write(
                http.send(h11.Response(status_code=status, headers=_headers(content_type, len(body), headers)))
                + http.send(h11.Data(data=body))
                + http.send(h11.EndOfMessage())
            )
            try:
                async with asyncio.timeout(self.body_timeout):
                    await writer.drain()
            except TimeoutError:
                return  # the client does not read its answer
            if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
                return  # h11 says the connection cannot be reused (Connection: close, HTTP/1.0)
            http.start_next_cycle()
            self._move(conn, _State.IDLE)
            kept = True

    async def _read_head(
        self, conn: _Connection, http: h11.Connection, reader: asyncio.StreamReader, kept: bool
    ) -> Any:
        """The next request head (or ``ConnectionClosed``): a new connection has ``head_timeout`` for it, a
        keep-alive one (``kept``) ``keepalive_timeout`` for its first byte and ``head_timeout`` from there."""
        loop = asyncio.get_running_loop()
        received = bool(http.trailing_data[0])  # a pipelined request
        if received:
            self._move(conn, _State.HEAD)
            kept = False
        try:
            async with asyncio.timeout(self.keepalive_timeout if kept else self.head_timeout) as deadline:
                while True:
                    event = _parse(http)
                    if event is not h11.NEED_DATA:
                        return event
                    data = await reader.read(READ_SIZE)
                    if data and not received:
                        received = True
                        self._move(conn, _State.HEAD)
                        if kept:
                            deadline.reschedule(loop.time() + self.head_timeout)
                    http.receive_data(data)
        except TimeoutError:
            if not received:
                raise _Idle from None
            raise _Refuse(408, "request head not received in time") from None

    async def _exchange(
        self,
        conn: _Connection,
        http: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        kept: bool,
    ) -> tuple[int, bytes, str, dict[str, str]]:
        """Read one request and answer it: ``(status, body, content type, extra headers)``."""
        event = await self._read_head(conn, http, reader, kept)
        if isinstance(event, h11.ConnectionClosed):
            raise _Idle
        assert isinstance(event, h11.Request)
        self._move(conn, _State.BUSY)
        request_headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
        path = event.target.split(b"?", 1)[0]
        if path in (b"/health", b"/metrics"):
            await self._read_body(http, reader, 0)  # none expected; keeps the connection in step
            body, content_type = self._report(path)
            return 200, body, content_type, {}
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
        if self._busy > self.max_requests:
            self.accept.metrics.count_request("http", Verdict.UNAVAILABLE.value)
            raise _Refuse(
                503, f"collector busy: {self.max_requests} requests in progress", {"retry-after": str(retry_after())}
            )
        if http.they_are_waiting_for_100_continue:
            writer.write(http.send(h11.InformationalResponse(status_code=100, headers=[])))
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await self._read_body(http, reader, self.max_body)
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

    async def _read_body(self, http: h11.Connection, reader: asyncio.StreamReader, limit: int) -> bytes:
        body = bytearray()
        while True:
            event = await _next_event(http, reader)
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


def _parse(conn: h11.Connection) -> Any:
    """h11's next event; a framing error is answered with h11's status hint."""
    try:
        return conn.next_event()
    except h11.RemoteProtocolError as e:
        raise _Refuse(e.error_status_hint, str(e)) from None


async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
    """The next h11 event, reading as needed."""
    while True:
        event = _parse(conn)
        if event is not h11.NEED_DATA:
            return event
        data = await reader.read(READ_SIZE)
        if not data and conn.their_state is h11.SEND_BODY:
            raise _Refuse(400, "connection closed mid-body")
        conn.receive_data(data)


async def _refuse(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, detail: str, headers: dict[str, str]
) -> None:
    """Answer ``status`` and close the way that lets the client read it (:func:`_linger`)."""
    with contextlib.suppress(Exception):
        writer.write(_raw_answer(status, detail, headers))
        await _linger(reader, writer)


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


def _raw_answer(
    status: int, detail: str, extra: dict[str, str], body: bytes | None = None, content_type: str = JSON
) -> bytes:
    """An answer that closes the connection, written without h11 (its state may be an error state); ``body``
    defaults to ``{"detail": detail}``."""
    if body is None:
        body = json.dumps({"detail": detail[:1000]}).encode()
    head = [f"HTTP/1.1 {status} {_reason(status)}", *(f"{k}: {v}" for k, v in _headers(content_type, len(body), extra))]
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
