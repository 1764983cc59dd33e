"""Connection floods against a real collector process on 127.0.0.1: idle and trickling sockets by the thousand, a
peer over its bound, a burst of 1,000 concurrent posters. `/health` and agents stay served, every refusal is an
answer (503 or 429 with Retry-After, never a reset), and what was refused arrives once when retried."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from ..helpers.collector import PB, assert_record, read_records, start, stop
from ..helpers.otlp import all_spans, make_request, random_trajectory

HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
SECOND = 1.0  # "served within a second" (the bound)


@pytest.fixture(autouse=True)
def enough_files() -> None:
    """The test holds thousands of sockets: its own file descriptor limit goes to the hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 8000:
        pytest.skip(f"the hard file descriptor limit ({hard}) is below the 8000 these floods hold")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(port: int, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        sockets.append(s)
    return sockets


def state(s: socket.socket) -> str:
    """``open`` (nothing from the server yet), or what the server sent before closing (``b''``: closed quietly)."""
    s.setblocking(False)
    try:
        if not s.recv(1, socket.MSG_PEEK):
            return "closed"
    except BlockingIOError:
        return "open"
    return "answered"


def answer(s: socket.socket, timeout: float = 5.0) -> bytes:
    """All the server sends until it closes; raises on a reset."""
    s.setblocking(True)
    s.settimeout(timeout)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def status_of(data: bytes) -> tuple[int, str | None]:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
    assert match, data[:200]
    retry = re.search(rb"\r\nretry-after: (\d+)\r\n", data.split(b"\r\n\r\n", 1)[0] + b"\r\n", re.IGNORECASE)
    return int(match.group(1)), retry.group(1).decode() if retry else None


def timed_health(port: int, source: str = "127.0.0.1") -> tuple[int, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: collector\r\nConnection: close\r\n\r\n")
        status, _ = status_of(answer(s))
    return status, time.monotonic() - started


def timed_post(port: int, body: bytes) -> tuple[int, float]:
    started = time.monotonic()
    r = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers=PB, timeout=5)
    return r.status_code, time.monotonic() - started


@contextlib.contextmanager
def trickling(port: int, count: int, every: float = 0.2) -> Iterator[list[socket.socket]]:
    """``count`` connections that send a request head one byte at a time, never finishing it."""
    sockets = connect(port, count)
    for s in sockets:
        s.sendall(HEAD)
    stop_event = threading.Event()

    def trickle() -> None:
        while not stop_event.wait(every):
            for s in sockets:
                with contextlib.suppress(OSError):
                    s.send(b"x")

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield sockets
    finally:
        stop_event.set()
        thread.join()


def close_all(*groups: list[socket.socket]) -> None:
    for group in groups:
        for s in group:
            s.close()


def held(port: int, series: str = "strands_tito_http_connections") -> int:
    """A number from the collector's `/metrics`: the connections it holds, or another series."""
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(series)} (\d+)$", metrics, re.MULTILINE)
    assert match or series.startswith("strands_tito_requests_total"), metrics  # a counter shows once it counts
    return int(match.group(1)) if match else 0


def evictions(port: int) -> int:
    return sum(
        held(port, f'strands_tito_requests_total{{protocol="http",outcome="evicted_{what}"}}')
        for what in ("idle", "head")
    )


def settle(port: int, at_least: int, count: Callable[[int], int] = held, timeout: float = 20.0) -> None:
    """Wait until the collector has taken the connections opened (the kernel queues them until it accepts them):
    ``count`` (connections held, or evicted) reaches ``at_least``."""
    deadline = time.monotonic() + timeout
    while count(port) < at_least:
        assert time.monotonic() < deadline, f"{count.__name__} is {count(port)}, not {at_least}"
        time.sleep(0.2)


def agents_served(port: int, seed: int, count: int = 3) -> list[bytes]:
    """``/health`` and ``count`` agents' exports, each served (200) within a second; returns the bodies sent."""
    bodies = []
    for i in range(count):
        status, took = timed_health(port)
        assert status == 200 and took < SECOND, (status, took)
        body = make_request(all_spans(random_trajectory(random.Random(seed + i), turns=1))).SerializeToString()
        status, took = timed_post(port, body)
        assert status == 200 and took < SECOND, (status, took)
        bodies.append(body)
    return bodies


def test_thousands_of_idle_and_trickling_connections_are_held_and_leave_health_and_agents_served(
    tmp_path: Path,
) -> None:
    """3,000 idle and 200 trickling connections with the default bound (the file descriptor limit): all are held,
    and `/health` and agents are served within a second meanwhile."""
    proc, port = start(tmp_path, "--head-timeout", "30", "--log-level", "WARNING")
    idle = connect(port, 3000)
    try:
        with trickling(port, 200) as heads:
            settle(port, 3200)
            agents_served(port, 100)
            assert [state(s) for s in idle].count("open") == 3000
            assert [state(s) for s in heads].count("open") == 200
            assert held(port) >= 3200
            close_all(heads)
    finally:
        close_all(idle)
        stop(proc)
    records = read_records(tmp_path / "out.jsonl", 3)
    for i, line in enumerate(records):
        assert_record(line, random_trajectory(random.Random(100 + i), turns=1))


def kept_alive(port: int, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections, each after one answered request (idle between requests)."""
    sockets = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        sockets.append(s)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: collector\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            data += s.recv(65536)
        assert data.startswith(b"HTTP/1.1 200 "), data
    return sockets


def test_when_full_the_idle_longest_go_first_then_the_slowest_heads_each_answered_503(tmp_path: Path) -> None:
    """`--max-connections 250`: 100 trickling heads, then 200 keep-alive connections idle after a request; the 50
    idle longest are answered 503 + Retry-After and closed, the (older) heads are kept; 300 more heads then push
    out the remaining idle ones and then the oldest heads, in order. `/health` and agents are served within a
    second throughout."""
    proc, port = start(tmp_path, "--max-connections", "250", "--head-timeout", "30", "--log-level", "WARNING")
    try:
        with trickling(port, 100) as old_heads:
            settle(port, 100)
            idle = kept_alive(port, 200)
            settle(port, 50, evictions)
            for s in idle[:50]:
                status, retry = status_of(answer(s))
                assert status == 503 and retry is not None
            kept = [state(s) == "open" for s in idle[50:]]
            assert kept.count(True) >= 140 and kept == sorted(kept), "the idle longest go first"  # (settle's own GETs)
            assert [state(s) for s in old_heads].count("open") == 100
            agents_served(port, 200, count=2)
            with trickling(port, 300) as new_heads:
                settle(port, 50 + 290, evictions)
                time.sleep(0.3)
                # The rest of the idle ones made room first, then the oldest heads.
                assert all(state(s) == "answered" for s in idle[50:])
                gone = [state(s) == "answered" for s in old_heads + new_heads]
                assert gone.count(True) >= 100, gone.count(True)
                # The oldest heads go first: every one of the earlier burst before any of the newest heads (the
                # order within one burst of simultaneous connects is the kernel's accept order, not asserted).
                assert all(gone[:100]), "the oldest heads go first"
                status, retry = status_of(answer(old_heads[0]))
                assert status == 503 and retry is not None
                assert [state(s) for s in new_heads[-100:]].count("open") == 100
                agents_served(port, 300, count=1)
                close_all(new_heads)
            close_all(old_heads, idle)
    finally:
        stop(proc)
    assert len(read_records(tmp_path / "out.jsonl", 3)) == 3


def test_a_request_head_has_a_tight_bound_and_a_kept_connection_its_own(tmp_path: Path) -> None:
    """A head that keeps trickling is cut at `--head-timeout` (408) although bytes keep coming; a keep-alive
    connection waits `--keepalive-timeout` between requests, longer than a head may take, and is served after."""
    proc, port = start(tmp_path, "--head-timeout", "1", "--keepalive-timeout", "3", "--log-level", "WARNING")
    try:
        with trickling(port, 1, every=0.1) as heads:
            started = time.monotonic()
            status, _ = status_of(answer(heads[0]))
            assert status == 408 and time.monotonic() - started < 2
        kept = socket.create_connection(("127.0.0.1", port))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: c\r\n\r\n")
        first = kept.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        time.sleep(1.8)  # past a head's bound, within the keep-alive one
        assert state(kept) == "open"
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: c\r\nConnection: close\r\n\r\n")
        assert status_of(answer(kept))[0] == 200
    finally:
        stop(proc)


def test_a_peer_over_its_bound_gets_429_and_others_are_served(tmp_path: Path) -> None:
    """`--max-connections-per-peer 50`: 127.0.0.2 holds 50; its next 100 requests are answered 429 + Retry-After
    (and its `/health` still 200); 127.0.0.1's `/health` and exports are served within a second."""
    proc, port = start(tmp_path, "--max-connections-per-peer", "50", "--log-level", "WARNING")
    held = connect(port, 50, source="127.0.0.2")
    try:
        time.sleep(0.3)
        over = connect(port, 100, source="127.0.0.2")
        for s in over:
            s.sendall(HEAD + b"Content-Length: 0\r\n\r\n")
        for s in over:
            status, retry = status_of(answer(s))
            assert status == 429 and retry is not None
        assert timed_health(port, source="127.0.0.2")[0] == 200
        assert [state(s) for s in held].count("open") == 50
        agents_served(port, 400, count=2)
    finally:
        close_all(held)
        stop(proc)


async def _post_until_taken(port: int, body: bytes, answers: list[int], resets: list[str]) -> None:
    """One agent: POST, and on 503/429 wait Retry-After and post again, as OTLP exporters do."""
    request = HEAD + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            data = await reader.read()
            writer.close()
        except OSError as e:
            resets.append(repr(e))
            await asyncio.sleep(1)
            continue
        if not data:
            resets.append("closed without an answer")
            await asyncio.sleep(1)
            continue
        status, retry = status_of(data)
        answers.append(status)
        if status == 200:
            return
        assert status in (429, 503) and retry is not None, data[:300]
        await asyncio.sleep(int(retry))


async def test_a_burst_of_1000_posters_is_answered_every_time_and_every_trajectory_arrives_once(
    tmp_path: Path,
) -> None:
    """1,000 agents post at once against `--max-connections 256 --max-inflight 64`: every attempt gets 200 or 503 +
    Retry-After (no reset, no silent close), and after their retries the 1,000 trajectories are written once each."""
    proc, port = start(tmp_path, "--max-connections", "256", "--log-level", "WARNING")
    trajectories = [random_trajectory(random.Random(5000 + i), turns=1) for i in range(1000)]
    bodies = [make_request(all_spans(t)).SerializeToString() for t in trajectories]
    answers: list[int] = []
    resets: list[str] = []
    try:
        async with asyncio.timeout(90):
            await asyncio.gather(*(_post_until_taken(port, body, answers, resets) for body in bodies))
    finally:
        _, _, err = stop(proc)
    assert resets == [], (len(resets), resets[:5])
    assert answers.count(200) == 1000 and answers.count(503) > 0, (answers.count(200), answers.count(503))
    records = read_records(tmp_path / "out.jsonl", 1000, timeout=60)
    assert len(records) == 1000
    by_id = {line["trajectory_id"]: line for line in records}
    assert len(by_id) == 1000
    for t in trajectories:
        assert_record(by_id[t.trajectory_id], t)
    assert "Traceback" not in err


def test_health_is_answered_while_every_kind_of_flood_runs_at_once(tmp_path: Path) -> None:
    """`--max-connections 200 --max-inflight 8`: 20 slow bodies (8 take every request slot, 12 are answered 503 on
    their head), 1,000 idle connections and 100 trickling heads at once; `/health` is answered 200 within a second,
    ten times over, and an agent's export gets 200 or 503 + Retry-After, never silence."""
    proc, port = start(
        tmp_path, "--max-connections", "200", "--max-inflight", "8", "--head-timeout", "30", "--log-level", "WARNING"
    )
    slow = connect(port, 20)
    try:
        for s in slow:
            s.sendall(HEAD + b"Content-Length: 100000\r\n\r\n" + b"x" * 10)
        time.sleep(0.5)
        refused = [s for s in slow if state(s) == "answered"]
        assert len(refused) == 12
        for s in refused:
            status, retry = status_of(answer(s))
            assert status == 503 and retry is not None
        with trickling(port, 100) as heads:
            idle = connect(port, 1000)
            settle(port, 8 + 100 + 1000 - 200, evictions)
            try:
                for _ in range(10):
                    status, took = timed_health(port)
                    assert status == 200 and took < SECOND, (status, took)
                body = make_request(all_spans(random_trajectory(random.Random(9), turns=1))).SerializeToString()
                status, _ = timed_post(port, body)
                assert status in (200, 503)
            finally:
                close_all(idle, heads)
    finally:
        close_all(slow)
        stop(proc)


def test_the_collector_raises_its_file_descriptor_limit_and_bounds_connections_by_it(tmp_path: Path) -> None:
    """Started with a soft limit of 1024, the collector raises it to the hard limit, holds up to three quarters of
    it by default, and says so in the log and `/metrics`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        proc, port = start(tmp_path, "--log-level", "INFO")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
        assert held(port, "strands_tito_file_limit") == expected
        assert held(port, "strands_tito_http_connection_limit") == min(65536, expected - expected // 4)
    finally:
        _, _, err = stop(proc)
    assert f"file_limit=<{expected}>, was=<1024> | raised the file descriptor limit" in err
