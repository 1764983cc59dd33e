"""Multi-agent episodes: every agent's trajectory exact, linked by episode and parent, through a real collector.

Real Strands agents on the local engine (one scripted conversation per agent, told apart by the system prompt), the
real OpenTelemetry SDK exporting over OTLP/HTTP to an in-process collector, and the records it writes. Two shapes:
an orchestrator calling a sub-agent as a tool, and a Strands Swarm handing off between two agents. The GenAI ids
(``gen_ai.conversation.id``, ``gen_ai.agent.*``) are read from what the OTLP exporter actually sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from strands import Agent, tool
from strands.multiagent import Swarm

from strands_tito import spans
from strands_tito.capture import recorder as capture
from strands_tito.collector import Collector
from strands_tito.testing.engine import LocalEngine, Reply, Script
from strands_tito.trajectory import Trajectory

from ..helpers.agents import hermes_call, make_model
from ..helpers.collector import parquet_rows
from ..helpers.otlp import OTLPSink, read_jsonl


@pytest.fixture
def sink(otlp_sinks: Callable[[], OTLPSink]) -> OTLPSink:
    return otlp_sinks()


@pytest.fixture
def export(
    collector: Collector, sink: OTLPSink, plug: Callable[[SpanProcessor], None]
) -> Callable[[], Awaitable[None]]:
    """Spans go over OTLP/HTTP to the collector and to the sink; awaiting the result flushes both (off the event
    loop, where the in-process collector answers)."""
    processors = [
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector.http_port}/v1/traces")),
        BatchSpanProcessor(OTLPSpanExporter(endpoint=sink.traces_url)),
    ]
    for processor in processors:
        plug(processor)

    async def flush() -> None:
        for processor in processors:
            assert await asyncio.to_thread(processor.force_flush)

    return flush


async def records(path: Path, count: int) -> dict[str, dict[str, Any]]:
    for _ in range(200):
        lines = read_jsonl(path)
        if len(lines) >= count:
            return {line["trajectory_id"]: line for line in lines}
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} did not get {count} records")


def chat_spans_sent(sink: OTLPSink) -> list[dict[str, Any]]:
    """The attributes of every ``chat`` span the OTLP exporter sent to the sink."""
    return [dict(span.attributes) for span in sink.spans() if spans.TURN_INDEX in span.attributes]


def trajectory_of(agent: Agent) -> Trajectory:
    state = capture.state_of(agent)
    assert state is not None and isinstance(state.trajectory, Trajectory)
    return state.trajectory


def assert_exact(record: dict[str, Any], trajectory: Trajectory) -> None:
    assert record["complete"] is True, record["reason"]
    assert record["token_ids"] == trajectory.token_ids
    assert record["loss_mask"] == trajectory.loss_mask
    # Spans carry logprobs as float32.
    as_f32 = [np.float32(np.nan if v is None else v) for v in trajectory.logprobs]
    assert np.array_equal(np.array(record["logprobs"], dtype=float).astype(np.float32), as_f32, equal_nan=True)


def agent(engine: LocalEngine, tokenizer: Any, name: str, tools: list[Any] | None = None) -> Agent:
    return Agent(
        model=make_model(engine, tokenizer, model_id="policy"),
        name=name,
        agent_id=f"{name}-id",
        system_prompt=f"You are the {name}.",
        tools=tools or [],
        callback_handler=None,
    )


async def test_orchestrator_and_sub_agent_as_a_tool(
    start_engine: Callable[..., LocalEngine],
    qwen3: Any,
    export: Callable[[], Awaitable[None]],
    sink: OTLPSink,
    tmp_path: Path,
) -> None:
    engine = start_engine(
        Script(
            match="You are the orchestrator.",
            turns=[Reply(text=hermes_call("ask_researcher", question="What is 6*7?")), Reply(text="It is 42.")],
        ),
        Script(match="You are the researcher.", turns=[Reply(text="6*7 = 42.")]),
    )
    researcher = agent(engine, qwen3, "researcher")

    @tool
    async def ask_researcher(question: str) -> str:
        """Ask the researcher a question.

        Args:
            question: The question.
        """
        return str(await researcher.invoke_async(question))

    orchestrator = agent(engine, qwen3, "orchestrator", [ask_researcher])
    await orchestrator.invoke_async("What is 6*7? Ask the researcher.")
    capture.record_reward(1.0, agent=orchestrator, episode=True)  # every agent of the episode
    capture.record_reward(0.5, agent=researcher)  # and one agent alone
    parent, child = trajectory_of(orchestrator), trajectory_of(researcher)
    for a in (orchestrator, researcher):
        a.model.reset()  # type: ignore[attr-defined]
    await export()
    written = await records(tmp_path / "out.jsonl", 2)

    assert_exact(written[parent.trajectory_id], parent)
    assert_exact(written[child.trajectory_id], child)
    top, sub = written[parent.trajectory_id], written[child.trajectory_id]
    assert top["parent_trajectory_id"] is None and sub["parent_trajectory_id"] == parent.trajectory_id
    assert top["episode_id"] == sub["episode_id"] is not None
    assert (top["agent_name"], top["agent_id"]) == ("orchestrator", "orchestrator-id")
    assert (sub["agent_name"], sub["agent_id"]) == ("researcher", "researcher-id")
    assert top["sample_index"] == sub["sample_index"] == 0
    assert (top["rewards"], sub["rewards"]) == ([1.0], [1.0, 0.5])
    # The Parquet columns carry the same lineage.
    rows = {r["trajectory_id"]: r for r in await parquet_rows(tmp_path / "parquet", 2)}
    assert rows[child.trajectory_id]["parent_trajectory_id"] == parent.trajectory_id
    assert rows[child.trajectory_id]["episode_id"] == top["episode_id"]

    # The GenAI ids, as the OTLP exporter sent them on each chat span.
    sent = chat_spans_sent(sink)
    assert len(sent) == len(parent.turns) + len(child.turns)
    for attributes in sent:
        tid = attributes[spans.TRAJECTORY_ID]
        name = "orchestrator" if tid == parent.trajectory_id else "researcher"
        assert attributes["gen_ai.conversation.id"] == tid
        assert (attributes["gen_ai.agent.name"], attributes["gen_ai.agent.id"]) == (name, f"{name}-id")


async def test_swarm_agents_share_the_episode(
    start_engine: Callable[..., LocalEngine], qwen3: Any, export: Callable[[], Awaitable[None]], tmp_path: Path
) -> None:
    engine = start_engine(
        Script(
            match="You are the planner.",
            turns=[
                Reply(text=hermes_call("handoff_to_agent", agent_name="solver", message="Compute 6*7.")),
                Reply(text="Handed to the solver."),
            ],
        ),
        Script(match="You are the solver.", turns=[Reply(text="6*7 = 42.")]),
    )
    planner, solver = agent(engine, qwen3, "planner"), agent(engine, qwen3, "solver")
    swarm = Swarm([planner, solver], entry_point=planner)
    result = await swarm.invoke_async("What is 6*7?")
    assert [node.node_id for node in result.node_history] == ["planner", "solver"]
    first, second = trajectory_of(planner), trajectory_of(solver)
    capture.record_reward(1.0, agent=solver, episode=True)
    for a in (planner, solver):
        a.model.reset()  # type: ignore[attr-defined]
    await export()
    written = await records(tmp_path / "out.jsonl", 2)

    assert_exact(written[first.trajectory_id], first)
    assert_exact(written[second.trajectory_id], second)
    a, b = written[first.trajectory_id], written[second.trajectory_id]
    assert a["episode_id"] == b["episode_id"] is not None  # the swarm's trace
    assert a["parent_trajectory_id"] is None and b["parent_trajectory_id"] is None  # the swarm started both
    assert (a["agent_name"], b["agent_name"]) == ("planner", "solver")
    assert a["rewards"] == b["rewards"] == [1.0]
