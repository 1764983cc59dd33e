"""Property-based fuzzing of the collector's OTLP input (hypothesis) over HTTP and gRPC.

Bodies are real OTLP requests built from real spans, then bent: attributes replaced by values of any type, spans of
random kinds, random bytes flipped or cut. For every example both protocols must answer 200 (possibly with partial
success) or a clear 4xx / gRPC status, never 5xx or UNKNOWN; afterwards the collector is healthy, real trajectories
come out exact, and it restarts on the same store.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from strands_tito import spans as schema
from strands_tito.collector import Collector, CollectorConfig

from ..helpers.collector import PB
from ..helpers.otlp import all_spans, any_value, make_request, make_span, random_trajectory, read_jsonl, turn_spans

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
KEYS = [v for k, v in vars(schema).items() if isinstance(v, str) and v.startswith(schema.PREFIX) and k.isupper()]
SEED = random_trajectory(random.Random(5150), turns=3)

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=64),
)
values = st.one_of(st.none(), st.recursive(scalars, lambda inner: st.lists(inner, max_size=6), max_leaves=20))
# Built once (they use the random module, which strategies must not); each example draws its own span ids.
SPANS: list[Span] = [*turn_spans(SEED), *all_spans(SEED, reward=1.0)[-2:]]
UNRELATED = make_span("other", {"a": 1})


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A real span of the seed trajectory (or an end/reward/call span) with some attributes bent, maybe corrupted."""
    span = Span()
    span.CopyFrom(draw(st.sampled_from(SPANS)))
    span.trace_id = draw(st.binary(min_size=16, max_size=16))
    span.span_id = draw(st.binary(min_size=8, max_size=8))
    changes = draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=4))
    attributes = {kv.key: kv for kv in span.attributes}
    for key, value in changes.items():
        if value is None:
            attributes.pop(key, None)
        else:
            attributes[key] = KeyValue(key=key, value=any_value(value))
    del span.attributes[:]
    span.attributes.extend(attributes.values())
    body = make_request([span, UNRELATED]).SerializeToString()
    if draw(st.booleans()):  # flip or cut bytes of the encoded request
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        body = bytes(data[: draw(st.integers(0, len(data)))])
    return body


class Running:
    """A collector on its own event loop thread, for synchronous hypothesis tests."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.collector = self._start()

    def _start(self) -> Collector:
        config = CollectorConfig(
            store=self.tmp / "store.db",
            outputs=[f"jsonl:{self.tmp / 'out.jsonl'}"],
            http_port=0,
            grpc_port=0,
            progress_interval=0,
        )
        c = Collector(config)
        asyncio.run_coroutine_threadsafe(c.start(), self.loop).result(30)
        return c

    def restart(self) -> None:
        asyncio.run_coroutine_threadsafe(self.collector.stop(), self.loop).result(60)
        self.collector = self._start()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.collector.stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    r = Running(tmp_path_factory.mktemp("fuzz"))
    yield r
    r.close()


def exact(running: Running, count: int, trajectories: list[Any]) -> None:
    path = running.tmp / "out.jsonl"
    for _ in range(200):
        lines = read_jsonl(path)
        by_id = {x["trajectory_id"]: x for x in lines}
        if all(t.trajectory_id in by_id for t in trajectories):
            for t in trajectories:
                record = by_id[t.trajectory_id]
                assert record["complete"], record["reason"]
                assert record["token_ids"] == t.token_ids and record["loss_mask"] == t.loss_mask
            return
        threading.Event().wait(0.05)
    raise AssertionError("trajectories were not written")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_fuzzed_bodies_get_clear_answers(running: Running, body: bytes) -> None:
    c = running.collector
    r = httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, headers=PB, timeout=30)
    assert r.status_code in (200, 400), (r.status_code, r.content[:300])
    with grpc.insecure_channel(f"127.0.0.1:{c.grpc_port}") as channel:
        try:
            channel.unary_unary(EXPORT)(body, timeout=30)
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e  # type: ignore[attr-defined]


def test_after_fuzzing_the_collector_is_healthy_exact_and_restarts(running: Running) -> None:
    """Runs after the fuzzer (same module collector and store)."""
    rng = random.Random(8)
    before = random_trajectory(rng)
    c = running.collector
    assert httpx.get(f"http://127.0.0.1:{c.http_port}/health").json()["status"] == "ok"
    body = make_request(all_spans(before)).SerializeToString()
    assert httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, headers=PB).status_code == 200
    exact(running, 1, [before])
    running.restart()  # whatever the fuzzer left in the store
    after = random_trajectory(rng)
    c = running.collector
    body = make_request(all_spans(after)).SerializeToString()
    assert httpx.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, headers=PB).status_code == 200
    exact(running, 2, [before, after])
    assert httpx.get(f"http://127.0.0.1:{c.http_port}/health").json()["status"] == "ok"
