"""``strands-tito collect`` as a real process: SIGTERM and SIGINT stop it in time with exit 0, a port in use fails at
once with one line, stalled connections are cut, the token stays secret, and stored poison cannot stop a restart."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from strands_tito import spans as schema
from strands_tito.collector.store import Store, StoredSpan

from ..helpers.collector import PB, read_records, start, stop
from ..helpers.otlp import all_spans, make_request, make_span, random_trajectory


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_an_idle_collector_with_exit_0(tmp_path: Path, sig: int) -> None:
    proc, _ = start(tmp_path)
    code, took, err = stop(proc, sig)
    assert code == 0, err[-2000:]
    assert took <= 10
    assert "Traceback" not in err


def test_sigterm_with_open_connections_and_data_in_flight(tmp_path: Path) -> None:
    t = random_trajectory(random.Random(3))
    proc, port = start(tmp_path)
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(b"POST /v1/traces HTTP/1.1\r\nContent-Length: 1000\r\n\r\npartial")
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/traces", content=make_request(all_spans(t)).SerializeToString(), headers=PB
    )
    assert r.status_code == 200
    code, took, err = stop(proc)
    stalled.close()
    assert code == 0 and took <= 10, err[-2000:]
    [record] = read_records(tmp_path / "out.jsonl", 1)  # flushed before exit
    assert record["complete"] and record["token_ids"] == t.token_ids


def test_port_in_use_exits_at_once_with_one_line(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable, "-m", "strands_tito.cli", "collect", "--http", f"127.0.0.1:{port}", "--grpc", "off",
                "--store", str(tmp_path / "store"), "--jsonl", str(tmp_path / "o.jsonl"), "--log-level", "WARNING",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        took = time.monotonic() - started
    finally:
        holder.close()
    assert proc.returncode != 0
    # The package's eager agent-side imports may add transformers' own "PyTorch was not found" notice; ours is one line.
    lines = [x for x in proc.stderr.splitlines() if x.strip() and not x.startswith("[transformers]")]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], proc.stderr
    assert took < 30


def test_stalled_head_and_body_get_408(tmp_path: Path) -> None:
    proc, port = start(tmp_path, "--head-timeout", "1", "--body-timeout", "1")
    try:
        for data in (
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n",
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nab",
        ):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.settimeout(10)
                started = time.monotonic()
                s.sendall(data)
                answer = s.recv(4096)
                assert answer.startswith(b"HTTP/1.1 408 "), answer
                assert time.monotonic() - started < 5
        with socket.create_connection(("127.0.0.1", port)) as s:  # idle: closed quietly
            s.settimeout(10)
            assert s.recv(4096) == b""
    finally:
        stop(proc)


def test_token_from_file_or_environment_never_shown(tmp_path: Path) -> None:
    secret = "s3cret-" + os.urandom(8).hex()
    (tmp_path / "token").write_text(secret + "\n")
    t = random_trajectory(random.Random(4))
    body = make_request(all_spans(t)).SerializeToString()
    for extra, env in (
        (("--token-file", str(tmp_path / "token")), None),
        ((), {"STRANDS_TITO_COLLECTOR_TOKEN": secret}),
    ):
        proc, port = start(tmp_path, *extra, "--log-level", "DEBUG", env=env)
        try:
            url = f"http://127.0.0.1:{port}"
            assert httpx.post(f"{url}/v1/traces", content=body, headers=PB).status_code == 401
            r = httpx.post(f"{url}/v1/traces", content=body, headers={**PB, "Authorization": f"Bearer {secret}"})
            assert r.status_code == 200
            shown = httpx.get(f"{url}/metrics").text + httpx.get(f"{url}/health").text + r.text
        finally:
            _, _, err = stop(proc)
        assert secret not in shown and secret not in err
        assert "ps" not in proc.args  # the secret was never on the command line
        assert secret not in " ".join(map(str, proc.args))


def test_restart_on_a_store_with_spans_that_no_longer_decode(tmp_path: Path) -> None:
    """A store written by an older, more lenient collector: recovery quarantines the bad trajectory; the rest goes
    on."""
    store = Store(tmp_path / "store" / "collector.db")
    bad = make_span("chat", {schema.SCHEMA: 1, schema.KIND: "turn", schema.TRAJECTORY_ID: "poisoned"})
    store.add_spans([StoredSpan(bad.trace_id.hex(), bad.span_id.hex(), "poisoned", bad.SerializeToString(), {})], {})
    store.close()
    proc, port = start(tmp_path)
    try:
        t = random_trajectory(random.Random(5))
        body = make_request(all_spans(t)).SerializeToString()
        assert httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers=PB).status_code == 200
        records = {r["trajectory_id"]: r for r in read_records(tmp_path / "out.jsonl", 2)}
        assert records["poisoned"]["complete"] is False and "quarantined" in records["poisoned"]["reason"]
        assert records[t.trajectory_id]["complete"] and records[t.trajectory_id]["token_ids"] == t.token_ids
    finally:
        code, _, err = stop(proc)
    assert code == 0, err[-2000:]
