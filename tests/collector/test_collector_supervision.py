"""Background work survives failures: the idle sweeper and the export loops log, count, report ``degraded`` on
``/health`` and keep going; a trajectory whose record cannot be built is quarantined, the rest is written."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from strands_tito.collector import Collector, CollectorConfig

from ..helpers.collector import PB, assert_record, sweeping_collector, url, written
from ..helpers.otlp import all_spans, make_request, random_trajectory, turn_spans


class Flaky:
    """Wraps a method so that it raises ``times`` times, then works."""

    def __init__(self, method: Any, times: int) -> None:
        self.method, self.times = method, times

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.times > 0:
            self.times -= 1
            raise sqlite3.OperationalError("disk I/O error (injected)")
        return self.method(*args, **kwargs)


async def health(c: Collector) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        report: dict[str, Any] = (await http.get(f"http://127.0.0.1:{c.http_port}/health")).json()
        return report


async def wait_for(predicate: Any, timeout: float = 15) -> None:
    for _ in range(int(timeout / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def test_sweeper_and_export_loop_survive_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with sweeping_collector(tmp_path) as c:
        monkeypatch.setattr(c.ingestor, "sweep", Flaky(c.ingestor.sweep, 40))
        monkeypatch.setattr(c.store, "pending_batch", Flaky(c.store.pending_batch, 3))

        async def degraded() -> bool:
            return (await health(c)).get("failing", {}).keys() >= {"sweeper", f"export-{c.exporters[0].name}"}

        await wait_for(degraded)
        assert (await health(c))["status"] == "degraded"
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"http://127.0.0.1:{c.http_port}/metrics")).text
        assert 'strands_tito_task_failures_total{task="sweeper"}' in metrics
        # Both keep running: an unended trajectory is swept and exported once the failures stop.
        t = random_trajectory(random.Random(1))
        async with httpx.AsyncClient() as http:
            r = await http.post(url(c), content=make_request(turn_spans(t)).SerializeToString(), headers=PB)
            assert r.status_code == 200
        [line] = await written(tmp_path / "o.jsonl", 1, timeout=30)
        assert line["complete"] is False and line["token_ids"] == t.token_ids

        async def healthy() -> bool:
            return (await health(c))["status"] == "ok"

        await wait_for(healthy)


async def test_a_record_that_cannot_be_built_is_quarantined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug while building one trajectory costs that trajectory only (written incomplete, with the reason)."""
    import strands_tito.assembly as assembly

    config = CollectorConfig(
        store=tmp_path / "s.db", outputs=[f"jsonl:{tmp_path / 'o.jsonl'}"], http_port=0, grpc_port=None
    )
    c = Collector(config)
    await c.start()
    rng = random.Random(2)
    poisoned, good = random_trajectory(rng), random_trajectory(rng)
    real = assembly.build_record

    def build(tid: str, *args: Any, **kwargs: Any) -> Any:
        if tid == poisoned.trajectory_id:
            raise RuntimeError("injected bug")
        return real(tid, *args, **kwargs)

    monkeypatch.setattr(assembly, "build_record", build)
    try:
        async with httpx.AsyncClient() as http:
            for t in (poisoned, good):
                r = await http.post(url(c), content=make_request(all_spans(t)).SerializeToString(), headers=PB)
                assert r.status_code == 200
        lines = {x["trajectory_id"]: x for x in await written(tmp_path / "o.jsonl", 2)}
        assert lines[poisoned.trajectory_id]["complete"] is False
        assert "quarantined" in lines[poisoned.trajectory_id]["reason"]
        assert_record(lines[good.trajectory_id], good)
        assert c.store.counts()["open_spans"] == 0  # the poisoned trajectory's spans are gone with it
    finally:
        await c.stop()
