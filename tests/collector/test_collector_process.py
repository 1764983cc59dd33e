"""The collector as a real process: kill -9 at random moments loses and duplicates nothing; two collectors behind a
router that routes like otel-config.yaml never split a trajectory."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from strands_tito import spans as schema
from strands_tito.collector import Collector, CollectorConfig
from strands_tito.otlp import attributes_of
from strands_tito.trajectory import Trajectory

from ..helpers.collector import PB, CollectorProcess, read_records
from ..helpers.otlp import all_spans, make_request, random_trajectory


def requests_for(trajectories: list[Trajectory], rng: random.Random) -> list[bytes]:
    """All spans, shuffled, in requests of 1-5 spans (the way batches from many agents interleave).

    Turns and rewards come in any order; each trajectory's end signal comes after them, as capture emits it last (a
    span arriving after its trajectory was written is refused, not merged).
    """
    spans = [s for t in trajectories for s in all_spans(t, reward=float(len(t)))[:-1]]
    rng.shuffle(spans)
    for t in trajectories:
        last = max(
            i for i, s in enumerate(spans) if attributes_of(s.attributes)[schema.TRAJECTORY_ID] == t.trajectory_id
        )
        spans.insert(rng.randint(last + 1, len(spans)), all_spans(t)[-1])
    bodies = []
    while spans:
        n = rng.randint(1, 5)
        bodies.append(make_request(spans[:n]).SerializeToString())
        spans = spans[n:]
    return bodies


def send_all(bodies: list[bytes], port: Any, progress: list[int] | None = None) -> None:
    """Send each request until it is acknowledged, as an OTLP exporter retries (port may change on restart)."""
    with httpx.Client(timeout=5) as http:
        for i, body in enumerate(bodies):
            if progress is not None:
                progress[0] = i
            while True:
                try:
                    r = http.post(f"http://127.0.0.1:{port()}/v1/traces", content=body, headers=PB)
                    if r.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)


def canonical(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["trajectory_id"]: {k: v for k, v in r.items() if k != "trace_ids"} for r in records}


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rng = random.Random(42)
    trajectories = [random_trajectory(rng, turns=rng.randint(1, 6)) for _ in range(60)]
    bodies = requests_for(trajectories, rng)

    # Reference: an uninterrupted run.
    reference = CollectorProcess(tmp_path / "ref-store", tmp_path / "ref.jsonl")
    reference.start()
    try:
        send_all(bodies, lambda: reference.port)
        expected = canonical(read_records(tmp_path / "ref.jsonl", len(trajectories)))
    finally:
        reference.stop()
    assert len(expected) == len(trajectories)

    crashing = CollectorProcess(tmp_path / "crash-store", tmp_path / "crash.jsonl")
    crashing.start()
    done = threading.Event()
    kills: list[float] = []

    progress = [0]

    def chaos() -> None:
        # Die three times while requests are being sent and trajectories exported: at a random moment after
        # roughly a quarter, half and three quarters of the requests.
        for fraction in (0.25, 0.5, 0.75):
            while progress[0] < fraction * len(bodies) and not done.is_set():
                time.sleep(0.001)
            if done.is_set():
                return
            time.sleep(rng.uniform(0, 0.02))
            crashing.kill()
            kills.append(time.monotonic())
            crashing.start()

    killer = threading.Thread(target=chaos)
    killer.start()
    try:
        send_all(bodies, lambda: crashing.port, progress)
        done.set()
        killer.join()
        got = read_records(tmp_path / "crash.jsonl", len(trajectories))
    finally:
        done.set()
        killer.join()
        crashing.stop()
    assert len(kills) == 3, "the collector must die while data is still arriving"
    assert len(got) == len(trajectories), "a trajectory was written twice"
    assert canonical(got) == expected
    for t in trajectories:
        record = canonical(got)[t.trajectory_id]
        assert record["complete"] and record["token_ids"] == t.token_ids


def route(trajectory_id: str, backends: int) -> int:
    """The routing rule of otel-config.yaml: hash of the tito.trajectory.id attribute."""
    return int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") % backends


@pytest.fixture
def two_collectors(tmp_path: Path) -> Iterator[list[Collector]]:
    loop = asyncio.new_event_loop()
    collectors = [
        Collector(
            CollectorConfig(
                store=tmp_path / f"c{i}.db",
                outputs=[f"jsonl:{tmp_path / f'c{i}.jsonl'}"],
                http_port=0,
                grpc_port=0,
                progress_interval=0,
            )
        )
        for i in range(2)
    ]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    for c in collectors:
        asyncio.run_coroutine_threadsafe(c.start(), loop).result(30)
    yield collectors
    for c in collectors:
        asyncio.run_coroutine_threadsafe(c.stop(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)


def test_router_keeps_each_trajectory_on_one_collector(two_collectors: list[Collector], tmp_path: Path) -> None:
    """A stand-in for the OpenTelemetry Collector's load-balancing exporter: split each incoming request by the
    routing attribute and forward the parts over OTLP/gRPC to the owning backend."""
    rng = random.Random(7)
    trajectories = [random_trajectory(rng, turns=rng.randint(1, 4)) for _ in range(40)]
    stubs = [
        trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}"))  # type: ignore[no-untyped-call]
        for c in two_collectors
    ]
    for body in requests_for(trajectories, rng):
        request = ExportTraceServiceRequest.FromString(body)
        parts = [ExportTraceServiceRequest() for _ in stubs]
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    target = parts[route(attributes_of(span.attributes)[schema.TRAJECTORY_ID], len(stubs))]
                    target.resource_spans.add().scope_spans.add().spans.append(span)
        for stub, part in zip(stubs, parts, strict=True):
            if part.resource_spans:
                stub.Export(part, timeout=10)
    owners: dict[str, int] = {}
    total = 0
    for i in range(2):
        expected = sum(1 for t in trajectories if route(t.trajectory_id, 2) == i)
        records = read_records(tmp_path / f"c{i}.jsonl", expected) if expected else []
        total += len(records)
        for record in records:
            assert record["complete"], record["reason"]
            assert record["trajectory_id"] not in owners
            owners[record["trajectory_id"]] = i
    assert total == len(trajectories) and set(owners) == {t.trajectory_id for t in trajectories}
    assert set(owners.values()) == {0, 1}


def test_otel_config_is_a_routing_pipeline() -> None:
    text = (Path(__file__).resolve().parents[2] / "otel-config.yaml").read_text()
    for needle in (
        "memory_limiter",
        "batch",
        "loadbalancing",
        "routing_key: attributes",
        "tito.trajectory.id",
        "sending_queue",
        "storage: file_storage",
        "max_recv_msg_size_mib",
    ):
        assert needle in text, needle
    assert os.path.getsize(Path(__file__).resolve().parents[2] / "otel-config.yaml") > 0
