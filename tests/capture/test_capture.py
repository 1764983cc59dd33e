"""Trace capture: spans from real agents reassemble into exactly the in-process trajectory.

Spans are taken both from the SDK's in-memory exporter and over the wire with the real OTLP/HTTP exporter to a
receiver on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import strands_tito
from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler
from strands_tito.capture import recorder as capture
from strands_tito.testing.engine import Reply, Script

from ..helpers.agents import DRIFT_CASES, IM_END, calculator, hermes_call, make_agent, make_model, slow_echo
from ..helpers.capture import assemble, assert_same, from_memory


async def run_tool_agent(start_engine, qwen3, *replies: Reply, tools=None, **config) -> tuple[Any, Any]:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=list(replies)))
    model = make_model(engine, qwen3, **config)
    agent = make_agent(model, tools or [calculator])
    await agent.invoke_async("Compute please.")
    return model, agent


@pytest.mark.parametrize("case", sorted(DRIFT_CASES))
async def test_drift_cases_survive_the_span_round_trip(start_engine, qwen3, memory, case: str) -> None:  # type: ignore[no-untyped-def]
    drift = DRIFT_CASES[case]
    call = qwen3.encode(hermes_call("calculator", expression="6 * 7"), add_special_tokens=False)
    if (
        case == "tool_call_tag_in_pieces"
    ):  # the call itself is spelled in pieces; a lone tag at the end would be malformed
        first, final = [*drift, *call[1:], IM_END], [*DRIFT_CASES["non_canonical_merge"], IM_END]
    else:
        first, final = [*call, *drift, IM_END], [*drift, IM_END]
    model, _ = await run_tool_agent(start_engine, qwen3, Reply(ids=first), Reply(ids=final))
    original = model.trajectory
    model.reset()  # the end signal
    record = assemble(from_memory(memory), {original.trajectory_id})[original.trajectory_id]
    assert record.complete, record.reason
    assert_same(record.trajectory, original)


async def test_parallel_tools_and_thinking(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    calls = hermes_call("slow_echo", text="a", delay=0.1) + "\n" + hermes_call("slow_echo", text="b", delay=0)
    model, _ = await run_tool_agent(
        start_engine,
        qwen3,
        Reply(text="<think>\nTwo echoes.\n</think>\n\n" + calls),
        Reply(text="<think>\nok\n</think>\n\nDone."),
        tools=[slow_echo],
        enable_thinking=True,
    )
    original = model.trajectory
    model.reset()
    record = assemble(from_memory(memory), {original.trajectory_id})[original.trajectory_id]
    assert record.complete, record.reason
    assert_same(record.trajectory, original)
    chat_spans = [s for s in memory.get_finished_spans() if s.name == "chat"]
    # Strands' own attributes are untouched next to ours.
    assert all("gen_ai.operation.name" in (s.attributes or {}) for s in chat_spans)


async def test_multi_invocation_episode_and_two_concurrent_agents(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(
            match="alpha",
            turns=[Reply(text=hermes_call("calculator", expression="1+1")), Reply(text="2"), Reply(text="bye")],
        ),
        Script(
            match="beta",
            turns=[Reply(text=hermes_call("calculator", expression="2+2")), Reply(text="4"), Reply(text="ciao")],
        ),
    )
    model = make_model(engine, qwen3)
    alpha, beta = make_agent(model, [calculator]), make_agent(model, [calculator])
    await asyncio.gather(alpha.invoke_async("alpha: 1+1?"), beta.invoke_async("beta: 2+2?"))
    await asyncio.gather(alpha.invoke_async("thanks"), beta.invoke_async("thanks"))
    originals = {t.trajectory_id: t for t in (model.trajectory_of(alpha), model.trajectory_of(beta))}
    model.reset()
    records = assemble(from_memory(memory), set(originals))
    assert set(records) == set(originals)
    for tid, original in originals.items():
        assert records[tid].complete, records[tid].reason
        assert len(original.turns) == 3
        assert len(records[tid].trace_ids) == 2  # two invocations, two traces, one trajectory
        assert_same(records[tid].trajectory, original)


@pytest.mark.parametrize("encoding", ["packed", "array"])
async def test_real_otlp_http_exporter_round_trip(  # type: ignore[no-untyped-def]
    start_engine, qwen3, plug, otlp_sinks, monkeypatch, encoding: str
) -> None:
    monkeypatch.setenv(capture.ENV_ENCODING, encoding)
    sink = otlp_sinks()
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=sink.traces_url, compression=None))
    plug(processor)
    try:
        drift = DRIFT_CASES["broken_utf8"]
        model, _ = await run_tool_agent(
            start_engine,
            qwen3,
            Reply(text=hermes_call("calculator", expression="3*3")),
            Reply(ids=[*drift, IM_END]),
        )
        original = model.trajectory
        model.reset()
        processor.force_flush()
    finally:
        sink.close()
    items = [(s.attributes, s.end_time_unix_nano, s.trace_id) for s in sink.spans()]
    kinds = {
        type(v)
        for a, _, _ in items
        if a.get(spans.TRAJECTORY_ID) == original.trajectory_id
        for k, v in a.items()
        if k == spans.OUTPUT_IDS
    }
    assert kinds == ({bytes} if encoding == "packed" else {list})
    record = assemble(items, {original.trajectory_id})[original.trajectory_id]
    assert record.complete, record.reason
    assert_same(record.trajectory, original)


async def test_missing_duplicated_and_reordered_spans_are_detected(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    call = Reply(text=hermes_call("calculator", expression="1+1"))
    model, _ = await run_tool_agent(start_engine, qwen3, call, call, Reply(text="2"))
    original = model.trajectory
    model.reset()
    items = [i for i in from_memory(memory) if i[0].get(spans.TRAJECTORY_ID) == original.trajectory_id]
    turns = [i for i in items if i[0][spans.KIND] == "turn"]
    end = [i for i in items if i[0][spans.KIND] == "end"]
    assert len(turns) == 3 and len(end) == 1
    wanted = {original.trajectory_id}

    # Reordered (and the end signal first): still exact, and the reordering is counted.
    assembler = TrajectoryAssembler()
    done = [r for a, t, tr in [*end, *reversed(turns)] for r in assembler.add(spans.decode_span(a, t), trace_id=tr)]
    assert len(done) == 1 and done[0].complete and assembler.stats.reordered == 2
    assert_same(done[0].trajectory, original)

    # Duplicated: ignored, counted, never merged twice.
    assembler = TrajectoryAssembler()
    done = [
        r
        for a, t, tr in [turns[0], *turns, turns[1], *end]
        for r in assembler.add(spans.decode_span(a, t), trace_id=tr)
    ]
    assert assembler.stats.duplicates == 2 and done[0].complete
    assert_same(done[0].trajectory, original)

    # Missing a middle turn, or the last one: incomplete, with the reason.
    for missing in (1, 2):
        record = assemble([*turns[:missing], *turns[missing + 1 :], *end], wanted)[original.trajectory_id]
        assert not record.complete and f"turn {missing} is missing" in (record.reason or "")
        assert record.trajectory.token_ids == original.token_ids[: original.turns[missing].prompt_start]

    # A turn that conflicts with one already received.
    forged = dict(turns[1][0])
    forged[spans.OUTPUT_IDS] = spans.encode_ids([1, 2, 3], "packed")
    forged[spans.OUTPUT_LOGPROBS] = spans.encode_logprobs([None] * 3, "packed")
    forged.pop(spans.WEIGHT_VERSIONS)  # its runs cover the real output, not the forged one
    record = assemble([*turns, (forged, 0, ""), *end], wanted)[original.trajectory_id]
    assert not record.complete and "different contents" in (record.reason or "")

    # No end signal: written as incomplete when flushed.
    record = assemble(turns, wanted)[original.trajectory_id]
    assert not record.complete and "no end signal" in (record.reason or "")


async def test_rewards_ride_on_the_trace(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    gc.collect()  # earlier tests' released agents end their trajectories: this agent's is the one open
    model, agent = await run_tool_agent(start_engine, qwen3, Reply(text="42"))
    capture.record_reward(0.5, agent=agent)
    strands_tito.record_reward(1.0)  # the public name, no agent: the one agent with an open trajectory
    original = model.trajectory
    model.reset()
    record = assemble(from_memory(memory), {original.trajectory_id})[original.trajectory_id]
    assert record.complete and record.rewards == [0.5, 1.0] and record.reward == 1.0


async def test_a_reward_without_agent_never_guesses_between_concurrent_agents(  # type: ignore[no-untyped-def]
    start_engine, qwen3, memory
) -> None:
    gc.collect()
    engine = start_engine(Script(turns=[Reply(text="41")]), Script(turns=[Reply(text="42")]))
    first, second = make_model(engine, qwen3), make_model(engine, qwen3)
    agents = [make_agent(first, [calculator]), make_agent(second, [calculator])]
    await asyncio.gather(*(agent.invoke_async("Compute please.") for agent in agents))
    first_id, second_id = first.trajectory.trajectory_id, second.trajectory.trajectory_id
    ids = sorted([first_id, second_id])

    with pytest.raises(strands_tito.RewardTargetError, match="2 agents have open trajectories") as raised:
        strands_tito.record_reward(1.0)  # two rollouts at once: whose reward is it?
    assert raised.value.choices == ids and all(tid in str(raised.value) for tid in ids)
    capture.record_reward(0.25, agent=agents[0])  # explicit: no question
    first.reset()
    strands_tito.record_reward(0.75)  # the other agent's trajectory is now the only one open
    second.reset()
    with pytest.raises(strands_tito.RewardTargetError, match="no open trajectory"):
        strands_tito.record_reward(1.0)

    records = assemble(from_memory(memory), set(ids))
    assert records[first_id].rewards == [0.25] and records[second_id].rewards == [0.75]


async def test_embedded_jsonl_writer(start_engine, qwen3, plug, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "trajectories.jsonl"
    processor = capture.TrajectorySpanProcessor(out)
    plug(processor)
    model, _ = await run_tool_agent(
        start_engine, qwen3, Reply(text=hermes_call("calculator", expression="2*21")), Reply(text="42")
    )
    original = model.trajectory
    model.reset()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    [line] = [x for x in lines if x["trajectory_id"] == original.trajectory_id]
    assert line["complete"] is True and line["token_ids"] == original.token_ids
    assert line["loss_mask"] == original.loss_mask
    assert line["segments"] == [[s.is_output, s.length] for s in original.segments]
    # The served model as the server names it (GET /v1/models), not SGLangModel's default model_id "sglang" (a
    # model_id the user sets is kept: tests/exporters/test_agentlightning.py's "policy").
    assert model.config["model_id"] == "sglang" and line["model_id"] == "strands-tito/local-engine"


def test_span_limits_are_checked_at_start_up() -> None:
    from opentelemetry.sdk.trace import SpanLimits

    with pytest.raises(capture.CaptureConfigError, match="OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"):
        capture.add_processors(TracerProvider(span_limits=SpanLimits(max_span_attributes=32)), [])
    with pytest.raises(capture.CaptureConfigError, match="OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        capture.check_span_limits(SpanLimits(max_span_attribute_length=64))
    capture.check_span_limits(SpanLimits())


def test_agentlightning_identity_from_the_controller_env() -> None:
    env = {"AGL_EVENT_URL": "http://127.0.0.1:8181/api/rollouts/ro-7/attempt/0/events", "AGL_KEY": "secret"}
    assert capture.agentlightning_identity(env) == {
        "agentlightning.rollout_id": "ro-7",
        "agentlightning.attempt_id": "0",
    }
    assert capture.agentlightning_identity({}) == {}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({spans.SCHEMA: 99}, "unknown tito.schema_version"),
        ({spans.OUTPUT_IDS: b"\x01\x02\x03"}, "whole number"),
        ({spans.OUTPUT_LOGPROBS: b"\x00" * 8}, "differ in length"),
        ({spans.TURN_INDEX: "1"}, "has type str"),
        ({spans.PREFIX_CRC32: None}, "has type NoneType"),
    ],
)
def test_bad_span_payloads_are_rejected(change: dict[str, Any], message: str) -> None:
    good = spans.turn_attributes("t", 0, 0, 0, [1, 2], [None, None], [3], [-0.5], finish_reason="stop")
    assert spans.decode_span(good)
    with pytest.raises(spans.SpanSchemaError, match=message):
        spans.decode_span({**good, **change})


@pytest.mark.parametrize("encoding", ["packed", "array"])
async def test_top_p_and_compact_routing_survive_the_span_round_trip(  # type: ignore[no-untyped-def]
    start_engine, qwen3, memory, monkeypatch, encoding: str
) -> None:
    """Top-p sets and routing (uint8 on the span: 8 experts) come back from the spans exactly, into the record."""
    monkeypatch.setenv(capture.ENV_ENCODING, encoding)
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="3*3")), Reply(text="9")]),
        routed_experts=(3, 2, 8),
    )
    model = make_model(engine, qwen3, return_top_p=True, return_routed_experts=True, routed_experts_layout=(3, 2, 8))
    await make_agent(model, [calculator]).invoke_async("Compute please.")
    original = model.token_manager
    model.reset()
    items = from_memory(memory)
    turn_spans = [
        a for a, _, _ in items if a.get(spans.TRAJECTORY_ID) == original.trajectory_id and spans.TURN_INDEX in a
    ]
    compact = [a["tito.routed_experts.compact"] for a in turn_spans]
    assert all(isinstance(c, bytes) for c in compact) and spans.ROUTED_EXPERTS not in turn_spans[0]
    assert sum(map(len, compact)) == (len(original) - 1) * 3 * 2  # one byte per expert id
    record = assemble(items, {original.trajectory_id})[original.trajectory_id]
    assert record.complete, record.reason
    assert_same(record.trajectory, original)
    assert record.to_dict()["top_p"] == original.to_dict()["top_p"] is not None
    assert record.to_dict()["routed_experts"] == original.to_dict()["routed_experts"] is not None
