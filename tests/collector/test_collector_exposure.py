"""Exposing the collector: connections are bounded with a clean refusal and one log line per burst; an address
reachable from other machines needs a token or an explicit flag; secrets come from files."""

from __future__ import annotations

import gzip
import logging
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from strands_tito import spans
from strands_tito.collector.cli import parse_args
from strands_tito.collector.ingest import MAX_REQUEST_TOKENS
from strands_tito.trajectory import Trajectory

from ..helpers.collector import PB, read_records, start, stop
from ..helpers.otlp import all_spans, end_span, make_request, make_span, random_trajectory, turn_spans


def test_connections_past_the_limit_make_room_with_a_503_and_one_log_line_per_burst(tmp_path: Path) -> None:
    """Silent sockets fill the limit: each further connection takes the place of the oldest, which is answered 503
    + Retry-After (not left hanging, not reset); the burst is logged once when it starts and once when it ends, and
    exports work throughout."""
    proc, port = start(tmp_path, "--max-connections", "8", "--log-level", "WARNING")
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    try:
        time.sleep(0.3)  # the server has accepted them all
        for i in range(40):
            sockets.append(socket.create_connection(("127.0.0.1", port)))
            oldest = sockets[i]
            oldest.settimeout(5)
            answer = b""
            while chunk := oldest.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 503 ") and re.search(rb"retry-after: [123]\r\n", answer.lower()), answer
        t = random_trajectory(random.Random(2))
        r = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=make_request(all_spans(t)).SerializeToString(),
                       headers=PB, timeout=5)  # fmt: skip
        assert r.status_code == 200
    finally:
        for s in sockets:
            s.close()
        time.sleep(0.5)
        _, _, err = stop(proc)
    assert err.count("connection limit reached") == 1, err[-3000:]
    assert err.count("connection burst over") == 1 and "displaced=<41>" in err, err[-3000:]


def test_a_reachable_address_without_a_token_needs_an_explicit_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "strands_tito.cli", "collect", "--http", "0.0.0.0:0", "--grpc", "off",
         "--store", str(tmp_path / "store")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "--allow-no-token" in refused.stderr and "0.0.0.0" in refused.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was opened
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)
    monkeypatch.delenv("STRANDS_TITO_COLLECTOR_TOKEN", raising=False)
    assert parse_args(["--http", "0.0.0.0:4318", "--allow-no-token"]).host == "0.0.0.0"
    assert parse_args(["--grpc", "[::]:4317", "--token", "t"]).token == "t"
    for loopback in ("127.0.0.1:0", "localhost:0", "[::1]:0"):
        assert parse_args(["--http", loopback, "--grpc", "off"]).token is None
    with pytest.raises(SystemExit):
        parse_args(["--grpc", "10.1.2.3:4317"])


def test_the_agent_lightning_key_comes_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)
    monkeypatch.delenv("AGL_KEY", raising=False)
    (tmp_path / "key").write_text("k3y-from-file\n")
    config = parse_args(["--agl-url", "http://127.0.0.1:8080", "--agl-key-file", str(tmp_path / "key")])
    assert config.agl_key == "k3y-from-file"
    monkeypatch.setenv("AGL_KEY", "k3y-from-env")
    assert parse_args(["--agl-url", "http://127.0.0.1:8080"]).agl_key == "k3y-from-env"
    for argv in (
        ["--agl-url", "u", "--agl-key", "a", "--agl-key-file", str(tmp_path / "key")],
        ["--agl-url", "u", "--agl-key-file", str(tmp_path / "missing")],
    ):
        with pytest.raises(SystemExit):
            parse_args(argv)


def test_open_trajectories_are_bounded_and_the_bound_clears(tmp_path: Path) -> None:
    """Past --max-open-trajectories a request that starts a new trajectory gets 503 (retried by the client), while
    spans of open ones are still taken; once one finishes, the new one is taken."""
    proc, port = start(tmp_path, "--max-open-trajectories", "3", "--log-level", "ERROR")
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        rng = random.Random(8)
        trajectories = [random_trajectory(rng, turns=2) for _ in range(4)]
        for t in trajectories[:3]:
            assert httpx.post(url, content=make_request(all_spans(t)[:-1]).SerializeToString(), headers=PB).is_success
        refused = httpx.post(url, content=make_request(all_spans(trajectories[3])).SerializeToString(), headers=PB)
        assert refused.status_code == 503 and "retry-after" in refused.headers
        end = make_request(all_spans(trajectories[0])[-1:]).SerializeToString()
        assert httpx.post(url, content=end, headers=PB).status_code == 200
        again = httpx.post(url, content=make_request(all_spans(trajectories[3])).SerializeToString(), headers=PB)
        assert again.status_code == 200
        records = {r["trajectory_id"]: r for r in read_records(tmp_path / "out.jsonl", 2)}
        for t in (trajectories[0], trajectories[3]):
            assert records[t.trajectory_id]["complete"] and records[t.trajectory_id]["token_ids"] == t.token_ids
    finally:
        stop(proc)


def _span_of_tokens(trajectory_id: str, tokens: int) -> Any:
    """One turn span (its end signal apart) holding ``tokens`` prompt ids, all zero: a few KiB once gzipped."""
    attributes = spans.turn_attributes(
        trajectory_id, 0, 0, 0, bytes(4 * tokens), bytes(4 * tokens), b"\x01\x00\x00\x00", b"\x00" * 4,
        finish_reason="stop",
    )  # fmt: skip
    return make_span("chat", {"gen_ai.operation.name": "chat", **attributes})


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def test_tokens_per_request_are_bounded_span_by_span(tmp_path: Path) -> None:
    """Past --max-request-tokens a span is refused before its arrays are read, with the limit named (400 when it
    was all the request held; partial success otherwise), and nothing else is lost: the other trajectories of the
    same request are written exact, and the one that lost its turn is written incomplete, naming it."""
    proc, port = start(tmp_path, "--max-request-tokens", "1000", "--idle-timeout", "2", "--log-level", "ERROR")
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        alone = httpx.post(url, content=make_request([_span_of_tokens("big-1", 1001)]).SerializeToString(), headers=PB)
        assert alone.status_code == 400 and "at most 1000 per request (--max-request-tokens)" in alone.text

        rng = random.Random(4)
        small = [random_trajectory(rng, turns=2) for _ in range(2)]
        assert all(len(t) < 400 for t in small)
        big = Trajectory(trajectory_id="big-2")
        big.append_turn([5] * 900, [6], finish_reason="stop", output_logprobs=[-0.5])
        mixed = [*all_spans(small[0]), *turn_spans(big), *all_spans(small[1]), end_span(big)]
        response = httpx.post(url, content=make_request(mixed).SerializeToString(), headers=PB)
        answer = ExportTraceServiceResponse.FromString(response.content)
        assert response.status_code == 200 and answer.partial_success.rejected_spans == 1
        assert "--max-request-tokens" in answer.partial_success.error_message

        records = {r["trajectory_id"]: r for r in read_records(tmp_path / "out.jsonl", 3)}
        for t in small:
            assert records[t.trajectory_id]["complete"] and records[t.trajectory_id]["token_ids"] == t.token_ids
        assert (records["big-2"]["complete"], records["big-2"]["reason"]) == (False, "turn 0 is missing")
    finally:
        stop(proc)


def test_spans_per_request_are_bounded(tmp_path: Path) -> None:
    """Past --max-request-spans the rest of a request is refused unread, with the limit named (400 when nothing
    before it was taken; partial success otherwise, counting every refused span), and nothing else is lost: the
    trajectory wholly before the bound is written exact, the one cut by it is written incomplete, naming its missing
    turn, and the one wholly past it is not written at all."""
    proc, port = start(tmp_path, "--max-request-spans", "5", "--idle-timeout", "2", "--log-level", "ERROR")
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        strands_only = [make_span("execute_tool add", {"gen_ai.operation.name": "execute_tool"}) for _ in range(6)]
        refused = httpx.post(url, content=make_request(strands_only).SerializeToString(), headers=PB)
        assert refused.status_code == 400
        assert "holds 6 spans; the collector takes at most 5 per request (--max-request-spans)" in refused.text

        whole, cut, past = (random_trajectory(random.Random(seed), turns=2) for seed in (5, 6, 7))
        first, second = turn_spans(cut)
        request = [*all_spans(whole), first, end_span(cut), second, *all_spans(past)]
        response = httpx.post(url, content=make_request(request).SerializeToString(), headers=PB)
        answer = ExportTraceServiceResponse.FromString(response.content)
        assert response.status_code == 200 and answer.partial_success.rejected_spans == 4
        assert "(--max-request-spans): the last 4 were refused unread" in answer.partial_success.error_message

        records = {r["trajectory_id"]: r for r in read_records(tmp_path / "out.jsonl", 2)}
        assert records[whole.trajectory_id]["complete"] and records[whole.trajectory_id]["token_ids"] == whole.token_ids
        assert (records[cut.trajectory_id]["complete"], records[cut.trajectory_id]["reason"]) == (
            False,
            "turn 1 is missing",
        )
        assert past.trajectory_id not in records
    finally:
        stop(proc)


def test_a_small_request_of_many_tokens_costs_a_bounded_amount_of_memory(tmp_path: Path) -> None:
    """A 61 KiB gzip body decompresses to 8M token ids (61 MiB, under --max-decompressed-mb): decoding them would
    raise the collector's peak RSS by about 1.1 GB (docs/collector-faults.md); with the default
    --max-request-tokens it is refused from the protobuf, at the cost of the body and its parse."""
    proc, port = start(tmp_path, "--log-level", "ERROR")
    try:
        idle = _peak_rss_mib(proc.pid)
        body = gzip.compress(make_request([_span_of_tokens("huge", 8_000_000)]).SerializeToString())
        assert len(body) < 100 * 1024
        response = httpx.post(
            f"http://127.0.0.1:{port}/v1/traces", content=body, headers={**PB, "Content-Encoding": "gzip"}, timeout=120
        )
        assert response.status_code == 400 and f"at most {MAX_REQUEST_TOKENS} per request" in response.text
        growth = _peak_rss_mib(proc.pid) - idle
        assert growth < 300, f"peak RSS grew by {growth:.0f} MiB"
    finally:
        stop(proc)
