"""The collector from outside: its URL and output files, and ``strands-tito collect`` as a real process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from strands_tito.collector import Collector, CollectorConfig
from strands_tito.trajectory import Trajectory

from .otlp import read_jsonl

PB = {"Content-Type": "application/x-protobuf"}


@contextlib.asynccontextmanager
async def sweeping_collector(tmp_path: Path, idle_timeout: float = 0.4) -> AsyncIterator[Collector]:
    """An in-process collector on a free HTTP port (no gRPC) with its background work running: a trajectory without
    spans for ``idle_timeout`` seconds is swept and written, incomplete, to ``tmp_path / "o.jsonl"``."""
    config = CollectorConfig(
        store=tmp_path / "s.db",
        outputs=[f"jsonl:{tmp_path / 'o.jsonl'}"],
        http_port=0,
        grpc_port=None,
        idle_timeout=idle_timeout,
        progress_interval=0,
    )
    c = Collector(config)
    await c.start()
    background = asyncio.create_task(c.run_background())
    try:
        yield c
    finally:
        background.cancel()
        await c.stop()


def url(c: Collector) -> str:
    return f"http://127.0.0.1:{c.http_port}/v1/traces"


async def written(path: Path, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    for _ in range(int(timeout / 0.05)):
        lines = read_jsonl(path)
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} did not get {count} records")


async def parquet_rows(directory: Path, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Rows of the Parquet parts once ``count`` have been written (the Parquet exporter runs on its own thread)."""
    for _ in range(int(timeout / 0.05)):
        if any(directory.glob("part-*.parquet")):
            rows: list[dict[str, Any]] = pq.read_table(directory).to_pylist()
            if len(rows) >= count:
                return rows
        await asyncio.sleep(0.05)
    raise AssertionError(f"{directory} did not get {count} rows")


def assert_record(line: dict[str, Any], t: Trajectory) -> None:
    assert line["trajectory_id"] == t.trajectory_id
    assert line["complete"] is True, line["reason"]
    assert line["token_ids"] == t.token_ids
    assert line["loss_mask"] == t.loss_mask
    assert line["segments"] == [[s.is_output, s.length] for s in t.segments]
    assert len(line["logprobs"]) == len(t.logprobs)
    assert line["model_id"] == "test-model"


def read_records(path: Path, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = read_jsonl(path)
        if len(lines) >= count:
            time.sleep(0.5)  # anything more would be a duplicate
            return read_jsonl(path)
        time.sleep(0.1)
    raise AssertionError(f"only {len(lines)} of {count} records in {path}")


def start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "strands_tito.cli", "collect", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
            "--store", str(tmp_path / "store"), "--jsonl", str(tmp_path / "out.jsonl"), "--progress-interval", "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if match:
            return proc, int(match.group(1))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"collector did not start: {proc.communicate()[1][-2000:]}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, float, str]:
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, time.monotonic() - started, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CollectorProcess:
    """``strands-tito collect`` as a real process: HTTP on 127.0.0.1, gRPC off, JSONL out, ``extra`` options after
    those (later ones win). ``port=0`` takes the port the system gives at each start (``.port`` says which); a fixed
    port (``free_port()``) is where a restarted collector comes back, so agents keep sending to it. ``stderr``, when
    given, collects the log."""

    def __init__(self, store: Path, out: Path, *extra: str, port: int = 0, stderr: Path | None = None) -> None:
        self.store, self.out, self.stderr = store, out, stderr
        self.bind_port = self.port = port
        self.extra = list(extra)
        self.proc: subprocess.Popen[str] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> CollectorProcess:
        command = [sys.executable, "-m", "strands_tito.cli", "collect", "--http", f"127.0.0.1:{self.bind_port}"]
        command += ["--grpc", "off", "--store", str(self.store), "--jsonl", str(self.out)]
        command += ["--progress-interval", "0", "--log-level", "WARNING", *self.extra]
        log = self.stderr.open("a") if self.stderr is not None else None
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            match = re.search(r"listening on http://[\d.]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                return self
            if not line and self.proc.poll() is not None:
                break
        logged = self.stderr.read_text()[-3000:] if self.stderr is not None else ""
        raise RuntimeError(f"collector did not start: {logged}")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused collector must see the SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


def established_connections_to(port: int) -> int:
    """How many TCP connections to ``port`` on this machine are established, seen from the client's side (Linux's
    ``/proc/net/tcp``: a pool that was closed holds none)."""
    count = 0
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        if table.exists():
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":  # 01: ESTABLISHED
                    count += 1
    return count
