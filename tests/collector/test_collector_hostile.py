"""Hostile input over both protocols: every case gets a clear 4xx / gRPC status, never 500 or UNKNOWN; the collector
stays healthy; real trajectories sent before and after come out exact; and a restart on the same store works."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from strands_tito.collector import Collector, CollectorConfig
from strands_tito.trajectory import Trajectory

from ..helpers.hostile_cases import (
    BODY_CASES,
    HTTP_CASES,
    MAX_BODY,
    MAX_DECOMPRESSED,
    OTHER,
    PROTOBUF,
    RAW_HTTP_CASES,
    TOKEN,
    VICTIM,
)
from ..helpers.otlp import all_spans, end_span, make_request, random_trajectory, read_jsonl, turn_spans

AUTH = {"Authorization": f"Bearer {TOKEN}"}
HTTP_EXPECT = {"ok": 200, "bad": 400, "auth": 401, "large": 413}
GRPC_EXPECT = {
    "ok": grpc.StatusCode.OK,
    "bad": grpc.StatusCode.INVALID_ARGUMENT,
    "auth": grpc.StatusCode.UNAUTHENTICATED,
    "large": grpc.StatusCode.RESOURCE_EXHAUSTED,
}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@contextlib.asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[Collector]:
    config = CollectorConfig(
        store=tmp_path / "store.db",
        outputs=[f"jsonl:{tmp_path / 'out.jsonl'}"],
        http_port=0,
        grpc_port=0,
        token=TOKEN,
        max_body_bytes=MAX_BODY,
        max_decompressed_bytes=MAX_DECOMPRESSED,
        progress_interval=0,
        head_timeout=5,
        body_timeout=5,
    )
    c = Collector(config)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def post(c: Collector, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"http://127.0.0.1:{c.http_port}/v1/traces", content=body, headers=headers)


async def grpc_export(c: Collector, body: bytes, authorization: str | None) -> grpc.StatusCode:
    """Send raw bytes as the Export request (no client-side serialization: the body goes as it is)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{c.grpc_port}") as channel:
        call = channel.unary_unary(EXPORT)
        metadata = (("authorization", authorization),) if authorization is not None else None
        try:
            await call(body, metadata=metadata, timeout=30)
        except grpc.aio.AioRpcError as e:
            return e.code()
    return grpc.StatusCode.OK


async def send_good(c: Collector, spans: list[Any]) -> None:
    r = await post(c, make_request(spans).SerializeToString(), {"Content-Type": PROTOBUF, **AUTH})
    assert r.status_code == 200, r.content


async def records(path: Path, count: int) -> dict[str, dict[str, Any]]:
    for _ in range(200):
        lines = read_jsonl(path)
        if len(lines) >= count:
            return {x["trajectory_id"]: x for x in lines}
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} did not get {count} records")


def assert_exact(record: dict[str, Any], t: Trajectory) -> None:
    assert record["complete"] is True, record["reason"]
    assert record["token_ids"] == t.token_ids and record["loss_mask"] == t.loss_mask
    assert record["segments"] == [[s.is_output, s.length] for s in t.segments]


async def around(tmp_path: Path, hostile: Any) -> None:
    """Victim's first turn, the hostile input, the rest of the victim and another trajectory; then a restart."""
    async with running(tmp_path) as c:
        await send_good(c, turn_spans(VICTIM)[:1])
        await hostile(c)
        await send_good(c, [*turn_spans(VICTIM)[1:], end_span(VICTIM)])
        await send_good(c, all_spans(OTHER))
        got = await records(tmp_path / "out.jsonl", 2)
        assert_exact(got[VICTIM.trajectory_id], VICTIM)
        assert_exact(got[OTHER.trajectory_id], OTHER)
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"http://127.0.0.1:{c.http_port}/health")).json()
            metrics = (await http.get(f"http://127.0.0.1:{c.http_port}/metrics")).text
        assert health["status"] == "ok", health
        assert TOKEN not in metrics and TOKEN not in json.dumps(health)
    later = random_trajectory(random.Random(77))
    async with running(tmp_path) as c:  # the same store: recovery must work whatever was sent
        await send_good(c, all_spans(later))
        got = await records(tmp_path / "out.jsonl", 3)
        assert_exact(got[later.trajectory_id], later)


@pytest.mark.parametrize("name", sorted(BODY_CASES))
async def test_hostile_body_over_http_and_grpc(tmp_path: Path, name: str) -> None:
    case = BODY_CASES[name]

    async def hostile(c: Collector) -> None:
        headers = {"Content-Type": PROTOBUF}
        if case.authorization is not None:
            headers["Authorization"] = case.authorization
        r = await post(c, case.body, headers)
        assert r.status_code == HTTP_EXPECT[case.expect], r.content[:300]
        if r.status_code != 200:
            assert r.content, "an error answer says why"
        code = await grpc_export(c, case.body, case.authorization)
        assert code == GRPC_EXPECT[case.expect]

    await around(tmp_path, hostile)


@pytest.mark.parametrize("name", sorted(HTTP_CASES))
async def test_hostile_http_encoding_and_json(tmp_path: Path, name: str) -> None:
    body, headers, status = HTTP_CASES[name]

    async def hostile(c: Collector) -> None:
        r = await post(c, body, {"Content-Type": PROTOBUF, **AUTH, **headers})
        assert r.status_code == status, r.content[:300]

    await around(tmp_path, hostile)


async def raw_exchange(port: int, data: bytes, half_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.parametrize("name", sorted(RAW_HTTP_CASES))
async def test_hostile_http_framing(tmp_path: Path, name: str) -> None:
    data, status = RAW_HTTP_CASES[name]

    async def hostile(c: Collector) -> None:
        answer = await raw_exchange(c.http_port, data)
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]

    await around(tmp_path, hostile)


def test_the_table_is_big_enough() -> None:
    assert len(BODY_CASES) + len(HTTP_CASES) + len(RAW_HTTP_CASES) >= 60
    assert len(BODY_CASES) >= 60  # these run over both protocols
