"""A trajectory recorded without logprobs (``return_logprob=False``): no logprob array at all, anywhere.

Real Strands agents over HTTP against the local engine, the real OpenTelemetry SDK exporting over OTLP/HTTP to an
in-process collector: the trajectory's ``logprobs`` is None (never a list with holes at loss-mask 1), its spans carry
no logprob attribute, the JSONL and Parquet records hold ``null``, Agent Lightning's ``model_request`` choices have
``logprobs: null``, and slime's ``fill_sample`` refuses to invent ``rollout_log_probs``. A trajectory whose turns
would mix the two is refused before the request is sent (``strands_tito.checks.logprobs_presence``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans
from strands_tito.collector import Collector
from strands_tito.exporters.agentlightning import build_events
from strands_tito.providers.slime import fill_sample
from strands_tito.testing.engine import LocalEngine, Reply, Script
from strands_tito.trajectory import TrajectoryError

from ..helpers.agents import generate_records, make_agent, make_model
from ..helpers.collector import parquet_rows, written


class _Sample(SimpleNamespace):
    class Status:
        COMPLETED, TRUNCATED, ABORTED = "completed", "truncated", "aborted"


@pytest.fixture
def export(collector: Collector, plug: Callable[[SpanProcessor], None]) -> tuple[Callable[[], Awaitable[None]], Any]:
    """Spans go over OTLP/HTTP to the collector and into memory; awaiting the first flushes the collector's."""
    memory = InMemorySpanExporter()
    plug(SimpleSpanProcessor(memory))
    otlp = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces"))
    plug(otlp)

    async def flush() -> None:
        assert await asyncio.to_thread(otlp.force_flush)

    return flush, memory


async def test_a_trajectory_without_logprobs_holds_none_anywhere(
    start_engine: Callable[..., LocalEngine], qwen3: Any, export: Any, tmp_path: Path
) -> None:
    flush, memory = export
    engine = start_engine(Script(turns=[Reply(text="Hello."), Reply(text="Bye.")]))
    model = make_model(engine, qwen3, return_logprob=False, model_id="policy")
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    await agent.invoke_async("Again")
    trajectory = model.trajectory
    sent = generate_records(engine)
    assert [r.request.get("return_logprob") for r in sent] == [False, False]
    assert trajectory.token_ids == sent[-1].input_ids + sent[-1].output_ids and len(trajectory.turns) == 2
    assert trajectory.logprobs is None and not trajectory.packed_logprobs
    assert trajectory.to_dict()["logprobs"] is None and trajectory.model_dump()["logprobs"] is None

    chat = [dict(s.attributes or {}) for s in memory.get_finished_spans() if spans.TURN_INDEX in (s.attributes or {})]
    assert len(chat) == 2
    assert all(spans.OUTPUT_LOGPROBS not in a and spans.PROMPT_LOGPROBS not in a for a in chat)

    model.reset()  # the end signal
    await flush()
    [record] = await written(tmp_path / "out.jsonl", 1)
    assert record["complete"] is True, record["reason"]
    assert record["token_ids"] == trajectory.token_ids and record["loss_mask"] == trajectory.loss_mask
    assert record["logprobs"] is None
    [row] = await parquet_rows(tmp_path / "parquet", 1)
    assert row["logprobs"] is None and row["token_ids"] == trajectory.token_ids

    requests = [e for e in build_events(record) if e["event_type"] == "model_request"]
    assert len(requests) == 2
    assert all(e["data"]["response"]["choices"][0]["logprobs"] is None for e in requests)

    with pytest.raises(TrajectoryError, match="recorded without logprobs"):
        fill_sample(_Sample(), trajectory)
    assert fill_sample(_Sample(), trajectory, logprobs=False).rollout_log_probs is None


@pytest.mark.parametrize("first", [True, False], ids=["with-then-without", "without-then-with"])
async def test_turns_that_would_mix_are_refused_before_the_request(
    start_engine: Callable[..., LocalEngine], qwen3: Any, first: bool
) -> None:
    engine = start_engine(Script(turns=[Reply(text="Hello."), Reply(text="Bye.")]))
    model = make_model(engine, qwen3, return_logprob=first)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    model.update_config(return_logprob=not first)
    with pytest.raises(TrajectoryError, match="records logprobs for every turn or for none"):
        await agent.invoke_async("Again")
    assert len(generate_records(engine)) == 1  # nothing was sent
    assert model.trajectory.to_dict() == before
    model.update_config(return_logprob=first)
    await agent.invoke_async("Again")
    assert (model.trajectory.logprobs is None) is not first and len(model.trajectory.turns) == 2
