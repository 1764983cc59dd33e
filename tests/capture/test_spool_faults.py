"""The spool against a real collector process when things go wrong: a record the collector refuses is set aside, not
resent forever ahead of newer data; a spool on a full disk reports ``ENOSPC`` and still delivers every end signal, so
every trajectory gets a record, complete or saying what is missing."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans as schema
from strands_tito.capture.spool import Spool, encode_request
from strands_tito.capture.spool_processor import SpoolingSpanProcessor
from strands_tito.trajectory import Trajectory

from ..helpers.capture import emit_turn_spans, make_trajectory
from ..helpers.collector import PB
from ..helpers.otlp import all_spans, end_attributes, make_request, read_jsonl


@contextlib.contextmanager
def collector(tmp_path: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    """``strands-tito collect`` on free ports: ``(process, http port, grpc port)``; stopped (and resumed) at the end."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "strands_tito.cli", "collect", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
            "--store", str(tmp_path / "store"), "--jsonl", str(tmp_path / "out.jsonl"), "--progress-interval", "0",
            "--log-level", "WARNING", *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            match = re.search(r"listening on http://[\d.]+:(\d+) and grpc [\d.]+:(\d+)", line)
            if match:
                break
            if not line and proc.poll() is not None:
                raise RuntimeError("collector did not start")
        assert match is not None
        yield proc, int(match.group(1)), int(match.group(2))
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def exporter_for(protocol: str, http_port: int, grpc_port: int, timeout: float = 5) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=int(timeout))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=timeout)


def end_span(provider: TracerProvider, t: Trajectory) -> None:
    provider.get_tracer("t").start_span(schema.SPAN_END, attributes=end_attributes(t)).end()


def wait_records(path: Path, ids: set[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = {r["trajectory_id"]: r for r in read_jsonl(path)} if path.exists() else {}
        if ids <= records.keys():
            return records
        time.sleep(0.1)
    raise AssertionError(f"missing records: {sorted(ids - records.keys())}")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_refused_record_is_set_aside_and_later_trajectories_are_delivered(
    tmp_path: Path, protocol: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Late turns of a trajectory already written are refused (400 / INVALID_ARGUMENT); the spool reports them per
    trajectory and delivers the trajectories after them, in this process and in the next one that adopts the spool."""
    with collector(tmp_path) as (_, http_port, grpc_port):
        written = make_trajectory(2)
        r = httpx.post(
            f"http://127.0.0.1:{http_port}/v1/traces", content=make_request(all_spans(written)).SerializeToString(),
            headers=PB,
        )  # fmt: skip
        assert r.status_code == 200
        wait_records(tmp_path / "out.jsonl", {written.trajectory_id}, 20)

        # A previous process left new turns of that trajectory in the spool (the collector wrote it, as incomplete,
        # after its idle timeout while the agent was down).
        memory = InMemorySpanExporter()
        previous = TracerProvider()
        previous.add_span_processor(SimpleSpanProcessor(memory))
        emit_turn_spans(previous, written)
        left = Spool(tmp_path / "spool")
        left.append(encode_request(memory.get_finished_spans()))
        left.close()

        later = [make_trajectory(2) for _ in range(2)]
        for process in range(2):  # each adopts what the one before left in the spool
            spool = Spool(tmp_path / "spool")
            processor = SpoolingSpanProcessor(
                exporter_for(protocol, http_port, grpc_port), spool, schedule_delay=0.01, max_backoff=0.05
            )
            provider = TracerProvider()
            provider.add_span_processor(processor)
            emit_turn_spans(provider, later[process])
            end_span(provider, later[process])
            assert processor.force_flush(15_000)
            processor.shutdown()
            if process == 0:
                assert processor.refused == len(written.turns)
        records = wait_records(tmp_path / "out.jsonl", {t.trajectory_id for t in later}, 20)
    for t in later:
        assert records[t.trajectory_id]["complete"] and records[t.trajectory_id]["token_ids"] == t.token_ids
    err = capfd.readouterr().err
    assert f"refused {len(written.turns)} span(s) of trajectory {written.trajectory_id}" in err


def test_a_full_spool_disk_names_the_cause_and_every_trajectory_gets_a_record(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The collector is paused (exports time out, spans go to the spool) and the spool's disk is full: the stderr line
    says ENOSPC, not the byte limit; end signals wait in memory, so once the collector is back every trajectory has a
    record, exact when all its turns survived, else incomplete with the missing turns named."""
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(spool_dir)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs for a full disk: {mounted.stderr.decode().strip()}")
    try:
        with collector(tmp_path, "--idle-timeout", "3") as (proc, http_port, grpc_port):
            os.kill(proc.pid, signal.SIGSTOP)
            processor = SpoolingSpanProcessor(
                exporter_for("http", http_port, grpc_port, timeout=0.5),
                Spool(spool_dir),
                queue_spans=4,
                schedule_delay=0.01,
                max_backoff=0.05,
            )
            provider = TracerProvider()
            provider.add_span_processor(processor)
            trajectories = [make_trajectory(3, tokens=3000) for _ in range(8)]  # ~30 KB a turn span
            for t in trajectories:
                emit_turn_spans(provider, t)
                end_span(provider, t)
            deadline = time.monotonic() + 20
            while processor.dropped == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert processor.dropped > 0
            os.kill(proc.pid, signal.SIGCONT)
            assert processor.force_flush(30_000)
            processor.shutdown()
            records = wait_records(tmp_path / "out.jsonl", {t.trajectory_id for t in trajectories}, 30)
    finally:
        subprocess.run(["umount", "-l", str(spool_dir)], check=False)
    err = capfd.readouterr().err
    assert "No space left on device" in err and "STRANDS_TITO_SPOOL_MAX_BYTES" not in err
    incomplete = 0
    for t in trajectories:
        record = records[t.trajectory_id]
        if record["complete"]:
            assert record["token_ids"] == t.token_ids
        else:
            incomplete += 1
            assert "turn" in str(record["reason"]), record["reason"]
    assert incomplete > 0
