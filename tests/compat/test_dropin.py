"""strands-sglang users' names work on our one implementation: the seed API (0.3.x) and the 0.6.x API.

Everything runs a real Strands agent against the local engine; the trajectory is checked against what the engine
received and produced.
"""

from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import pytest

import strands_tito
from strands_tito import (
    LoopLimiter,
    LoopLimitReachedError,
    MaxMessagesReachedError,
    MaxToolCallsReachedError,
    MaxToolIterationsReachedError,
    Rollout,
    SGLangClient,
    ToolLimiter,
    ToolLimitReachedError,
    Trajectory,
    decode_routed_experts,
)
from strands_tito.testing.engine import Fault, Reply, Script, routed_experts_for

from ..helpers.agents import (
    IM_END,
    assert_matches_engine,
    calculator,
    generate_records,
    hermes_call,
    make_agent,
    make_model,
)
from ..helpers.collector import established_connections_to


def test_strands_sglang_public_names_exist() -> None:
    # strands_sglang 0.6.2's __all__ (the parser classes and registry come from the tool-parser rewrite).
    names = [
        "get_client", "get_client_from_slime_args", "get_tokenizer", "SGLangClient", "SGLangClientError",
        "SGLangHTTPError", "SGLangContextLengthError", "SGLangThrottledError", "SGLangConnectionError",
        "SGLangDecodingError", "SGLangModel", "Rollout", "get_tool_parser", "LoopLimiter", "LoopLimitReachedError",
        "MaxToolIterationsReachedError", "MaxToolCallsReachedError", "MaxMessagesReachedError",
    ]  # fmt: skip
    # ... and the seed (0.3.x) names.
    names += ["ToolLimiter", "decode_routed_experts"]
    missing = [n for n in names if not hasattr(strands_tito, n)]
    assert not missing
    assert Rollout is Trajectory
    assert ToolLimitReachedError is LoopLimitReachedError
    for error in (MaxToolIterationsReachedError, MaxToolCallsReachedError, MaxMessagesReachedError):
        assert issubclass(error, LoopLimitReachedError)
    assert issubclass(ToolLimiter, LoopLimiter)


# -- routed experts: the seed's module-level decode ------------------------------------------------------------------


def test_decode_routed_experts_takes_seq_len_and_checks_it() -> None:
    rows = routed_experts_for(list(range(100, 110)), 0, 3, 2, 8)  # 9 rows for 10 tokens
    raw = rows.astype("<i4").tobytes()
    whole = base64.b64encode(raw).decode()
    halves = [base64.b64encode(raw[: 4 * 6 * 4]).decode(), base64.b64encode(raw[4 * 6 * 4 :]).decode()]
    for data in (whole, halves):
        decoded = decode_routed_experts(data, seq_len=10, num_layers=3, top_k=2)
        assert decoded.shape == (9, 3, 2) and decoded.dtype == np.int32
        assert np.array_equal(decoded, rows)
    assert np.array_equal(decode_routed_experts(whole, 10, 3, 2), rows)  # 0.3.x's positional order
    with pytest.raises(ValueError, match=r"9 rows of 3x2, but seq_len=12 needs 11"):
        decode_routed_experts(whole, seq_len=12, num_layers=3, top_k=2)
    with pytest.raises(ValueError, match="do not split into rows"):
        decode_routed_experts(whole, seq_len=10, num_layers=4, top_k=2)


# -- 0.6.x: model.rollout, rollout_history, Rollout -----------------------------------------------------------------


async def test_rollout_and_rollout_history(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="6 * 7")), Reply(text="42")]),
        Script(turns=[Reply(text="Hello again.")]),
    )
    model = make_model(engine, qwen3)
    model.reset()  # nothing recorded yet: nothing goes to the history
    assert model.rollout_history == []

    await make_agent(model, [calculator]).invoke_async("What is 6 * 7?")
    first = model.rollout
    assert first is model.token_manager and isinstance(first, Rollout)
    records = generate_records(engine)
    assert_matches_engine(first, records)
    assert first.initial_prompt_length == len(records[0].input_ids or [])
    assert first.segment_info == [(False, first.initial_prompt_length), *first.segment_info[1:]]
    assert [is_output for is_output, _ in first.segment_info] == [False, True, False, True]
    assert first.image_data == []

    model.reset()
    assert model.rollout_history == [first] and model.rollout_history[0] is first
    assert len(model.rollout) == 0 and not model.rollout
    model.reset()  # an empty rollout is not kept
    assert model.rollout_history == [first]

    await make_agent(model).invoke_async("Hi")
    second = model.rollout
    assert second is not first and len(second.turns) == 1
    assert_matches_engine(second, generate_records(engine)[2:])
    model.reset()
    assert model.rollout_history == [first, second]


# -- LoopLimiter ------------------------------------------------------------------------------------------------------


async def test_loop_limiter_tool_iterations_end_on_a_whole_message(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    call = Reply(text=hermes_call("calculator", expression="1 + 1"))
    engine = start_engine(Script(turns=[call, call, Reply(text="done")]))
    model = make_model(engine, qwen3)
    limiter = LoopLimiter(max_tool_iters=1)
    agent = make_agent(model, [calculator], hooks=[limiter])
    with pytest.raises(LoopLimitReachedError) as raised:
        await agent.invoke_async("Add.")
    assert type(raised.value) is MaxToolIterationsReachedError
    assert (raised.value.count, raised.value.limit) == (1, 1)
    assert (limiter.tool_iter_count, limiter.tool_call_count, limiter.message_count) == (1, 1, 3)
    # The tool result was added to the history but never tokenized: the trajectory ends on the model's message.
    assert [m["role"] for m in agent.messages] == ["user", "assistant", "user"]
    trajectory = model.rollout
    assert len(trajectory.turns) == 1 and trajectory.token_ids[-1] == IM_END
    assert_matches_engine(trajectory, generate_records(engine))


async def test_loop_limiter_max_messages_counts_across_invocations_until_reset(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="One."), Reply(text="Two.")]))
    model = make_model(engine, qwen3)
    limiter = LoopLimiter(max_messages=4)
    agent = make_agent(model, hooks=[limiter])
    await agent.invoke_async("First?")  # messages 1 and 2
    await agent.invoke_async("Second?")  # 3 and 4: the limit is checked on user messages only
    assert limiter.message_count == 4
    with pytest.raises(MaxMessagesReachedError):
        await agent.invoke_async("Third?")  # the 5th message is a user message: stopped before any model call
    assert limiter.message_count == 5
    records = generate_records(engine)
    assert len(records) == 2
    assert_matches_engine(model.rollout, records)
    assert model.rollout.token_ids[-1] == IM_END

    limiter.reset()
    assert (limiter.message_count, limiter.tool_iter_count, limiter.tool_call_count) == (0, 0, 0)


async def test_loop_limiter_cancels_calls_beyond_max_parallel(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    three = "\n".join(hermes_call("calculator", expression=e) for e in ("2 + 3", "4 + 5", "6 + 7"))
    engine = start_engine(Script(turns=[Reply(text=three), Reply(text="5, 9 and 13.")]))
    model = make_model(engine, qwen3)
    limiter = LoopLimiter(max_parallel_tool_calls=1, max_tool_calls=10)
    await make_agent(model, [calculator], hooks=[limiter]).invoke_async("Three sums.")
    assert (limiter.tool_iter_count, limiter.tool_call_count, limiter.cancelled_tool_call_count) == (1, 3, 2)
    records = generate_records(engine)
    assert_matches_engine(model.rollout, records)
    # The model sees the first result and, for the other two, a tool error saying they were not run.
    turn = model.rollout.turns[1]
    results = qwen3.decode(model.rollout.token_ids[turn.prompt_start : turn.output_start])
    assert results.count("Max parallel tool calls (1) reached. This tool call was not executed.") == 2
    assert "<tool_response>\n5\n</tool_response>" in results and "9" not in results and "13" not in results


async def test_tool_limiter_keeps_the_seed_api(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    two = Reply(text=hermes_call("calculator", expression="1") + "\n" + hermes_call("calculator", expression="2"))
    engine = start_engine(Script(turns=[two, two, Reply(text="done")]))
    model = make_model(engine, qwen3)
    limiter = ToolLimiter(max_tool_iters=5, max_tool_calls=3)
    assert (limiter.max_parallel_tool_calls, limiter.max_messages) == (None, None)
    with pytest.raises(ToolLimitReachedError) as raised:
        await make_agent(model, [calculator], hooks=[limiter]).invoke_async("Go")
    assert type(raised.value) is MaxToolCallsReachedError
    assert (limiter.tool_iter_count, limiter.tool_call_count) == (2, 4)
    assert_matches_engine(model.token_manager, generate_records(engine))


# -- SGLangClient: 0.6.2's constructor options and close() -------------------------------------------------------------


async def test_client_takes_strands_sglang_options(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=2), Reply(text="ok")]))
    client = SGLangClient(
        base_url=engine.base_url, max_connections=4, timeout=None, connect_timeout=5.0, max_retries=3, retry_delay=0.01
    )
    assert (client.retry_delay, client.retry.backoff_base, client.max_retries, client.timeout) == (0.01, 0.01, 3, None)
    port = httpx.URL(engine.base_url).port
    assert port is not None
    others = established_connections_to(port)
    model = make_model(engine, qwen3)
    model.client = client
    await make_agent(model).invoke_async("Hi")
    assert [r.status for r in engine.records if r.path == "/generate"] == [503, 503, 200]
    assert_matches_engine(model.rollout, generate_records(engine))
    assert established_connections_to(port) > others  # kept alive for the next request
    await client.close()
    for _ in range(50):  # the transports close on the loop's next turns
        if established_connections_to(port) == others:
            break
        await asyncio.sleep(0.02)
    assert established_connections_to(port) == others
