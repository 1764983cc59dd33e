"""The collector as a real process when its disks fail: a record the store cannot take leaves its trajectory open and
it is finished once there is room; an output on a full disk makes ``/health`` degraded and ``--max-store-mb``
back-pressure (503) that clears once the exporter catches up; a second collector on the same store stops at once.

Full disks are small tmpfs mounts (skipped with the reason where mounting is not allowed)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from strands_tito.trajectory import Trajectory

from ..helpers.collector import PB, read_records, start, stop
from ..helpers.otlp import all_spans, make_request


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A directory on its own 64 MiB tmpfs; :func:`resize` makes its disk full or roomy again."""
    directory = tmp_path / "tmpfs"
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(directory)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full disk: {mounted.stderr.decode().strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def resize(directory: Path, free_bytes: int | None) -> None:
    """Leave about ``free_bytes`` free on the tmpfs (None: 64 MiB in all)."""
    if free_bytes is None:
        size = 64 * 1024 * 1024
    else:
        stat = os.statvfs(directory)
        size = (stat.f_blocks - stat.f_bfree) * stat.f_frsize + free_bytes
    subprocess.run(["mount", "-o", f"remount,size={size}", str(directory)], check=True)


def big_trajectory(rng: random.Random, turns: int = 3, tokens: int = 20_000) -> Trajectory:
    t = Trajectory(trajectory_id=f"big-{rng.getrandbits(48):012x}")
    for _ in range(turns):
        prompt = [rng.randrange(150_000) for _ in range(tokens)]
        output = [rng.randrange(150_000) for _ in range(200)]
        t.append_turn(prompt, output, finish_reason="stop", output_logprobs=[-rng.random() for _ in output])
    return t


def post(port: int, body: bytes) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers=PB, timeout=30)


def health(port: int) -> dict[str, object]:
    answer: dict[str, object] = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
    return answer


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_record_the_full_store_refuses_is_written_once_there_is_room(tmp_path: Path, tmpfs: Path) -> None:
    """The end signal is stored, the record is not (disk full): the request is answered 503, /health is degraded,
    and once the disk has room the trajectory is finished again and written exactly, without a restart."""
    proc, port = start(tmp_path, "--store", str(tmpfs / "store"), "--log-level", "WARNING")
    try:
        t = big_trajectory(random.Random(3))
        spans = all_spans(t)
        assert post(port, make_request(spans[:-1]).SerializeToString()).status_code == 200
        resize(tmpfs, 640 * 1024)  # room for the small end signal, not for the ~1.5 MB record
        answer = post(port, make_request(spans[-1:]).SerializeToString())
        assert answer.status_code == 503, answer.text
        wait_until(lambda: health(port)["status"] == "degraded", 10, "/health to say degraded")
        assert health(port)["open_trajectories"] == 1
        resize(tmpfs, None)
        [record] = read_records(tmp_path / "out.jsonl", 1, timeout=20)
        assert record["trajectory_id"] == t.trajectory_id and record["complete"] and record["token_ids"] == t.token_ids
        wait_until(lambda: health(port)["status"] == "ok", 10, "/health to say ok again")
    finally:
        stop(proc)


def test_an_output_on_a_full_disk_degrades_health_and_back_pressure_clears(tmp_path: Path, tmpfs: Path) -> None:
    """JSONL on a full disk: /health is degraded while its writes fail, the store fills up to --max-store-mb (503);
    once the disk has room the exporter catches up, the 503s stop without a restart and everything is written once."""
    resize(tmpfs, 4096)  # (0 would mean no limit)
    out = tmpfs / "out.jsonl"
    proc, port = start(tmp_path, "--jsonl", str(out), "--max-store-mb", "4", "--log-level", "ERROR")
    try:
        rng = random.Random(9)
        sent: list[Trajectory] = []
        while True:
            t = big_trajectory(rng, turns=1)
            answer = post(port, make_request(all_spans(t)).SerializeToString())
            if answer.status_code == 503:
                break
            assert answer.status_code == 200 and len(sent) < 40, answer.text
            sent.append(t)
        assert health(port)["status"] == "degraded"
        resize(tmpfs, None)
        wait_until(lambda: post(port, make_request([]).SerializeToString()).status_code == 200, 30, "503s to clear")
        wait_until(lambda: health(port)["status"] == "ok", 10, "/health to say ok again")
        records = read_records(out, len(sent))
        assert sorted(r["trajectory_id"] for r in records) == sorted(t.trajectory_id for t in sent)
    finally:
        stop(proc)


def test_a_second_collector_on_the_same_store_stops_at_once_with_one_line(tmp_path: Path) -> None:
    first, _ = start(tmp_path)
    try:
        started = time.monotonic()
        second = subprocess.run(
            [
                sys.executable, "-m", "strands_tito.cli", "collect", "--http", "127.0.0.1:0", "--grpc", "off",
                "--store", str(tmp_path / "store"), "--jsonl", str(tmp_path / "other.jsonl"),
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 1 and time.monotonic() - started < 20
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another collector" in lines[0] and str(first.pid) in lines[0], lines
    finally:
        stop(first)


def test_jsonl_rotated_during_a_failed_batch_and_moved_away(tmp_path: Path, tmpfs: Path) -> None:
    """A batch fails (disk full), logrotate moves the file and creates a new one, the disk gets room: the batch goes
    to the new file (no NUL padding) and the old one keeps exactly what it had (no torn line). A file moved away
    is created again for the next batch."""
    out = tmpfs / "out.jsonl"
    proc, port = start(tmp_path, "--jsonl", str(out), "--log-level", "ERROR")
    try:
        rng = random.Random(21)
        first, second, third = (big_trajectory(rng, turns=1) for _ in range(3))
        assert post(port, make_request(all_spans(first)).SerializeToString()).status_code == 200
        read_records(out, 1)
        resize(tmpfs, 64 * 1024)  # part of the next line fits, not all of it
        assert post(port, make_request(all_spans(second)).SerializeToString()).status_code == 200
        wait_until(lambda: health(port)["status"] == "degraded", 10, "the export to fail")
        os.rename(out, tmpfs / "out.jsonl.1")  # logrotate's "create"
        out.touch()
        resize(tmpfs, None)
        [record] = read_records(out, 1)
        assert record["trajectory_id"] == second.trajectory_id and b"\0" not in out.read_bytes()
        assert [r["trajectory_id"] for r in read_records(tmpfs / "out.jsonl.1", 1)] == [first.trajectory_id]
        os.rename(out, tmpfs / "moved.jsonl")
        assert post(port, make_request(all_spans(third)).SerializeToString()).status_code == 200
        assert [r["trajectory_id"] for r in read_records(out, 1)] == [third.trajectory_id]
    finally:
        stop(proc)


def test_parquet_parts_gather_many_trajectories(tmp_path: Path) -> None:
    """Trajectories finishing one at a time share a part (they wait in the store, up to the linger time) instead of
    a part each; at shutdown what is waiting becomes one part."""
    import pyarrow.parquet as pq

    proc, port = start(tmp_path, "--parquet", str(tmp_path / "parts"), "--log-level", "ERROR")
    try:
        rng = random.Random(4)
        for _ in range(12):
            t = big_trajectory(rng, turns=1, tokens=50)
            assert post(port, make_request(all_spans(t)).SerializeToString()).status_code == 200
            time.sleep(0.2)
        read_records(tmp_path / "out.jsonl", 12)
    finally:
        code, _, _ = stop(proc)
    assert code == 0
    parts = sorted((tmp_path / "parts").glob("part-*.parquet"))
    assert len(parts) == 1 and pq.read_table(parts[0]).num_rows == 12
