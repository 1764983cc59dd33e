"""The collector in process: OTLP/HTTP (protobuf, JSON, gzip) and gRPC in, exact trajectories out, bad input refused."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from strands_tito import spans as schema
from strands_tito.collector import Collector, CollectorConfig
from strands_tito.trajectory import Trajectory

from ..helpers.collector import PB, assert_record, parquet_rows, sweeping_collector, url, written
from ..helpers.otlp import all_spans, end_span, make_request, make_span, random_trajectory, turn_spans


def to_json(request: Any) -> bytes:
    data = json_format.MessageToDict(request)
    import base64

    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId"):
                    span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data).encode()


async def test_http_protobuf_gzip_json_and_grpc(collector: Collector, tmp_path: Path) -> None:
    rng = random.Random(1)
    trajectories = [random_trajectory(rng) for _ in range(4)]
    async with httpx.AsyncClient() as http:
        r = await http.post(
            url(collector), content=make_request(all_spans(trajectories[0], 0.5)).SerializeToString(), headers=PB
        )
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
        body = gzip.compress(make_request(all_spans(trajectories[1])).SerializeToString())
        r = await http.post(url(collector), content=body, headers={**PB, "Content-Encoding": "gzip"})
        assert r.status_code == 200
        r = await http.post(
            url(collector),
            content=to_json(make_request(all_spans(trajectories[2]))),
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{collector.grpc_port}", compression=grpc.Compression.Gzip
    ) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.Export(make_request(all_spans(trajectories[3])))

    lines = {x["trajectory_id"]: x for x in await written(tmp_path / "out.jsonl", 4)}
    for t in trajectories:
        assert_record(lines[t.trajectory_id], t)
    assert lines[trajectories[0].trajectory_id]["reward"] == 0.5
    rows = {r["trajectory_id"]: r for r in await parquet_rows(tmp_path / "parquet", 4)}
    assert sorted(rows) == sorted(lines)
    row = rows[trajectories[0].trajectory_id]
    assert row["token_ids"] == trajectories[0].token_ids and row["reward"] == 0.5


async def test_out_of_order_split_and_duplicated_arrival(collector: Collector, tmp_path: Path) -> None:
    rng = random.Random(2)
    a, b = random_trajectory(rng, turns=4), random_trajectory(rng, turns=2)
    pieces = [end_span(a), *reversed(turn_spans(a)), *turn_spans(b), end_span(b)]
    async with httpx.AsyncClient() as http:
        for i, span in enumerate(pieces):
            request = make_request([span]).SerializeToString()
            for _ in range(2 if i % 2 else 1):  # every other request sent twice, as an OTLP retry would
                r = await http.post(url(collector), content=request, headers=PB)
                assert r.status_code == 200
    lines = await written(tmp_path / "out.jsonl", 2)
    assert len(lines) == 2
    records = {x["trajectory_id"]: x for x in lines}
    assert_record(records[a.trajectory_id], a)
    assert_record(records[b.trajectory_id], b)
    assert collector.metrics.duplicates == 4
    # A retry arriving after the trajectory was written is not written again ...
    async with httpx.AsyncClient() as http:
        r = await http.post(url(collector), content=make_request([pieces[1]]).SerializeToString(), headers=PB)
        assert r.status_code == 200
        # ... while new spans reusing the written trajectory's id are refused, never silently dropped.
        r = await http.post(url(collector), content=make_request(all_spans(a)).SerializeToString(), headers=PB)
        assert r.status_code == 400 and b"cannot be reused" in r.content
    await asyncio.sleep(0.3)
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 2


def bad_turn(**change: Any) -> bytes:
    t = random_trajectory(random.Random(3), turns=1)
    [span] = turn_spans(t)
    attributes = {kv.key: kv for kv in span.attributes}
    from ..helpers.otlp import any_value

    for key, value in change.items():
        attributes[key].value.CopyFrom(any_value(value))
    return make_request([span]).SerializeToString()


BAD_INPUT = {
    "garbage bytes": (b"\x00\xffnot a protobuf at all\x13\x37" * 10, PB, 400),
    "wrong content type": (b"hello", {"Content-Type": "text/plain"}, 415),
    "truncated protobuf": (
        make_request(all_spans(random_trajectory(random.Random(4)))).SerializeToString()[:-7],
        PB,
        400,
    ),
    "gzip bomb": (gzip.compress(b"\x00" * (300 * 1024 * 1024)), {**PB, "Content-Encoding": "gzip"}, 413),
    "bad gzip": (b"\x1f\x8b\x08 not gzip", {**PB, "Content-Encoding": "gzip"}, 400),
    "unknown encoding": (b"x", {**PB, "Content-Encoding": "br"}, 400),
    "missing attribute": (None, PB, 400),
    "mistyped attribute": (bad_turn(**{schema.TURN_INDEX: "zero"}), PB, 400),
    "packed array of wrong length": (bad_turn(**{schema.OUTPUT_IDS: b"\x01\x00\x00"}), PB, 400),
    "logprobs of wrong length": (bad_turn(**{schema.OUTPUT_LOGPROBS: b"\x00\x00\x00\x00" * 999}), PB, 400),
    "unknown schema version": (bad_turn(**{schema.SCHEMA: 7}), PB, 400),
}


def _missing_attribute() -> bytes:
    t = random_trajectory(random.Random(5), turns=1)
    [span] = turn_spans(t)
    keep = [kv for kv in span.attributes if kv.key != schema.PREFIX_CRC32]
    del span.attributes[:]
    span.attributes.extend(keep)
    return make_request([span]).SerializeToString()


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
async def test_bad_input_is_refused_and_nothing_else_is_lost(collector: Collector, tmp_path: Path, case: str) -> None:
    body, headers, status = BAD_INPUT[case]
    body = _missing_attribute() if body is None else body
    good = random_trajectory(random.Random(6))
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(url(collector), content=body, headers=headers)
        assert r.status_code == status, r.content[:200]
        # The collector keeps serving: a good trajectory right after is stored and written.
        r = await http.post(url(collector), content=make_request(all_spans(good)).SerializeToString(), headers=PB)
        assert r.status_code == 200
    [line] = await written(tmp_path / "out.jsonl", 1)
    assert_record(line, good)


async def test_oversized_body_and_wrong_token(tmp_path: Path) -> None:
    config = CollectorConfig(
        store=tmp_path / "s.db",
        outputs=[f"jsonl:{tmp_path / 'o.jsonl'}"],
        http_port=0,
        grpc_port=0,
        token="s3cret",
        max_body_bytes=10_000,
        progress_interval=0,
    )
    c = Collector(config)
    await c.start()
    try:
        t = random_trajectory(random.Random(7))
        body = make_request(all_spans(t)).SerializeToString()
        async with httpx.AsyncClient() as http:
            r = await http.post(url(c), content=body, headers=PB)
            assert r.status_code == 401
            r = await http.post(url(c), content=body, headers={**PB, "Authorization": "Bearer wrong"})
            assert r.status_code == 401
            r = await http.post(url(c), content=b"x" * 20_000, headers={**PB, "Authorization": "Bearer s3cret"})
            assert r.status_code == 413
            r = await http.post(url(c), content=body, headers={**PB, "Authorization": "Bearer s3cret"})
            assert r.status_code == 200
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Export(make_request(all_spans(random_trajectory(random.Random(8)))))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Export(
                    make_request([make_span("chat", {schema.SCHEMA: 9, schema.TRAJECTORY_ID: "x"})]),
                    metadata=(("authorization", "Bearer s3cret"),),
                )
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await c.stop()


async def test_conflicting_turn_is_refused_and_marks_the_trajectory(collector: Collector, tmp_path: Path) -> None:
    t = random_trajectory(random.Random(9), turns=2)
    other = random_trajectory(random.Random(10), turns=2)
    forged = turn_spans(other)[1]
    for kv in forged.attributes:
        if kv.key == schema.TRAJECTORY_ID:
            kv.value.string_value = t.trajectory_id
    async with httpx.AsyncClient() as http:
        r = await http.post(url(collector), content=make_request(turn_spans(t)).SerializeToString(), headers=PB)
        assert r.status_code == 200
        r = await http.post(url(collector), content=make_request([forged]).SerializeToString(), headers=PB)
        assert r.status_code == 400 and b"conflicts" in r.content
        r = await http.post(url(collector), content=make_request([end_span(t)]).SerializeToString(), headers=PB)
        assert r.status_code == 200
    [line] = await written(tmp_path / "out.jsonl", 1)
    assert line["complete"] is False and "conflicts" in line["reason"]


async def test_partial_success_keeps_the_good_spans(collector: Collector, tmp_path: Path) -> None:
    good = random_trajectory(random.Random(11))
    bad = make_span("chat", {schema.SCHEMA: 1, schema.KIND: "turn", schema.TRAJECTORY_ID: "broken"})
    async with httpx.AsyncClient() as http:
        r = await http.post(
            url(collector), content=make_request([*all_spans(good), bad]).SerializeToString(), headers=PB
        )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    response = ExportTraceServiceResponse.FromString(r.content)
    assert r.status_code == 200 and response.partial_success.rejected_spans == 1
    [line] = await written(tmp_path / "out.jsonl", 1)
    assert_record(line, good)


async def test_idle_timeout_writes_an_incomplete_trajectory(tmp_path: Path) -> None:
    async with sweeping_collector(tmp_path) as c:
        t = random_trajectory(random.Random(12))
        async with httpx.AsyncClient() as http:
            await http.post(url(c), content=make_request(turn_spans(t)).SerializeToString(), headers=PB)
        [line] = await written(tmp_path / "o.jsonl", 1)
        assert line["complete"] is False and "no end signal" in line["reason"]
        assert line["token_ids"] == t.token_ids


async def test_overload_answers_retryable_codes(tmp_path: Path) -> None:
    config = CollectorConfig(
        store=tmp_path / "s.db",
        outputs=[f"jsonl:{tmp_path / 'o.jsonl'}"],
        http_port=0,
        grpc_port=0,
        max_store_bytes=1,
        progress_interval=0,
    )
    c = Collector(config)
    await c.start()
    try:
        body = make_request(all_spans(random_trajectory(random.Random(13)))).SerializeToString()
        async with httpx.AsyncClient() as http:
            r = await http.post(url(c), content=body, headers=PB)
        assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
        async with grpc.aio.insecure_channel(f"127.0.0.1:{c.grpc_port}") as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Export(make_request(all_spans(random_trajectory(random.Random(14)))))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await c.stop()


async def test_metrics_and_health(collector: Collector, tmp_path: Path) -> None:
    t = random_trajectory(random.Random(15))
    async with httpx.AsyncClient() as http:
        await http.post(url(collector), content=make_request(all_spans(t)).SerializeToString(), headers=PB)
        await written(tmp_path / "out.jsonl", 1)
        health = (await http.get(f"http://127.0.0.1:{collector.http_port}/health")).json()
        metrics = (await http.get(f"http://127.0.0.1:{collector.http_port}/metrics")).text
    assert health["status"] == "ok"
    assert "strands_tito_spans_received_total 4" in metrics
    assert 'strands_tito_trajectories_total{complete="true"} 1' in metrics
    for name in ("bytes_received_total", "export_queue_depth", "store_bytes", "open_trajectories", "requests_total"):
        assert f"strands_tito_{name}" in metrics


async def test_load_200_concurrent_agents(collector: Collector, tmp_path: Path) -> None:
    rng = random.Random(16)
    trajectories = [random_trajectory(rng, turns=rng.randint(1, 5)) for _ in range(200)]

    async def agent(http: httpx.AsyncClient, t: Trajectory) -> None:
        for span in all_spans(t, reward=1.0):
            body = make_request([span]).SerializeToString()
            for _ in range(50):  # an OTLP exporter retries 503 with backoff
                r = await http.post(url(collector), content=body, headers=PB)
                if r.status_code == 200:
                    break
                assert r.status_code == 503
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("never accepted")

    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        await asyncio.wait_for(asyncio.gather(*(agent(http, t) for t in trajectories)), timeout=90)
    lines = await written(tmp_path / "out.jsonl", 200, timeout=30)
    assert len(lines) == 200
    by_id = {x["trajectory_id"]: x for x in lines}
    for t in trajectories:
        assert_record(by_id[t.trajectory_id], t)


async def test_outputs_load_in_pandas_pyarrow_and_datasets(collector: Collector, tmp_path: Path) -> None:
    """The files are usable as they are: no extra code to read them."""
    import pandas as pd
    import pyarrow.json as pj

    rng = random.Random(21)
    complete = [random_trajectory(rng) for _ in range(3)]
    partial = random_trajectory(rng)
    async with httpx.AsyncClient() as http:
        for t in complete:
            await http.post(url(collector), content=make_request(all_spans(t, 1.0)).SerializeToString(), headers=PB)
        await http.post(url(collector), content=make_request(turn_spans(partial)[:1]).SerializeToString(), headers=PB)
    await written(tmp_path / "out.jsonl", 3)
    await asyncio.to_thread(collector.ingestor.sweep, 0)  # the partial one is written as incomplete
    lines = await written(tmp_path / "out.jsonl", 4)
    await parquet_rows(tmp_path / "parquet", 4)
    jsonl, parquet = tmp_path / "out.jsonl", tmp_path / "parquet"

    frame = pd.read_json(jsonl, lines=True)
    assert sorted(frame["complete"].tolist()) == [False, True, True, True]
    assert pj.read_json(jsonl).num_rows == 4
    parts = pd.read_parquet(parquet)
    assert sorted(parts["trajectory_id"]) == sorted(x["trajectory_id"] for x in lines)
    datasets = pytest.importorskip("datasets")
    for kind, files in (("json", str(jsonl)), ("parquet", str(parquet / "*.parquet"))):
        loaded = datasets.load_dataset(kind, data_files=files, split="train", cache_dir=str(tmp_path / f"hf-{kind}"))
        assert loaded.num_rows == 4
        row = loaded.filter(lambda r: r["trajectory_id"] == complete[0].trajectory_id)[0]
        assert row["token_ids"] == complete[0].token_ids and row["loss_mask"] == complete[0].loss_mask
