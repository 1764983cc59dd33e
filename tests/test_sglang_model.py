"""End to end: real Strands agents with real tools against the local engine over HTTP on 127.0.0.1.

The central assertion everywhere: the trajectory equals, token for token, what the engine received and produced.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel
from strands import tool
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException
from transformers import PreTrainedTokenizerBase

from strands_tito import (
    HistoryRewrittenError,
    MaxToolCallsReachedError,
    MaxToolIterationsReachedError,
    SGLangAbortedError,
    SGLangConnectionError,
    SGLangDecodingError,
    SGLangInvalidSampleError,
    SGLangResponseError,
    ToolLimiter,
    get_tool_parser,
)
from strands_tito.replay import top_p_rows
from strands_tito.testing.engine import Fault, Reply, Script, routed_experts_for

from .conftest import assert_matches_engine, generate_records, make_agent, make_model
from .tools import calculator

IM_END = 151645


def hermes_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@tool
async def slow_echo(text: str, delay: float) -> str:
    """Echo text after a delay.

    Args:
        text: What to echo.
        delay: Seconds to wait.
    """
    await asyncio.sleep(delay)
    return f"echo:{text}"


def decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))


async def test_multi_turn_tool_use_is_recorded_exactly(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(
            turns=[
                Reply(text=hermes_call("calculator", expression="25 * 17")),
                Reply(text=hermes_call("calculator", expression="425 + 1")),
                Reply(text="The answer is 426."),
            ]
        )
    )
    model = make_model(engine, qwen3)
    agent = make_agent(model, [calculator])
    result = await agent.invoke_async("What is 25 * 17 + 1?")
    assert "426" in str(result)

    records = generate_records(engine)
    trajectory = model.trajectory
    assert_matches_engine(trajectory, records)
    assert [t.finish_reason for t in trajectory.turns] == ["stop"] * 3
    assert trajectory.token_ids[trajectory.turns[0].output_start - 1] != IM_END
    # The tool result reached the model as tokens, exactly as the template renders it.
    second_prompt = trajectory.token_ids[trajectory.turns[1].prompt_start : trajectory.turns[1].output_start]
    assert decode(qwen3, second_prompt) == (
        "\n<|im_start|>user\n<tool_response>\n425\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # Later turns ask for input logprobs from one token before the new prompt, so the prefix cache stays usable.
    assert [r.request["logprob_start_len"] for r in records] == [
        -1,
        *(t.prompt_start - 1 for t in trajectory.turns[1:]),
    ]
    assert all(r.cached_tokens and r.cached_tokens > 0 for r in records[1:])
    # New prompt tokens carry the server's input logprobs; the first prompt has none.
    assert all(lp is None for lp in trajectory.logprobs[: trajectory.initial_prompt_length])
    turn = trajectory.turns[1]
    assert all(lp is not None for lp in trajectory.logprobs[turn.prompt_start : turn.output_start])
    assert trajectory.segment_info == [(i % 2 == 1, s.length) for i, s in enumerate(trajectory.segments)]


async def test_parallel_tool_results_follow_call_order(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    calls = [
        hermes_call("slow_echo", text="first", delay=0.2),
        hermes_call("not a valid name!"),
        hermes_call("slow_echo", text="third", delay=0),
    ]
    engine = start_engine(Script(turns=[Reply(text="\n".join(calls)), Reply(text="All done.")]))
    model = make_model(engine, qwen3)
    agent = make_agent(model, [slow_echo])
    await agent.invoke_async("Echo things.")

    # Strands collects results in completion order; the invalid name is a strict-parse error that never runs ...
    results = [b["toolResult"]["content"][0]["text"] for b in agent.messages[2]["content"]]
    (rejected,) = [r for r in results if r.startswith("Invalid tool call: unknown tool 'not a valid name!'")]
    assert model.tool_parse_errors == {"unknown_tool": 1}  # a name Strands refuses is reported as unknown_tool
    assert sorted(r for r in results if r != rejected) == ["echo:first", "echo:third"]
    # ... but the model sees the results in the order it made the calls.
    turn = model.trajectory.turns[1]
    prompt = decode(qwen3, model.trajectory.token_ids[turn.prompt_start : turn.output_start])
    positions = [prompt.index(marker) for marker in ("echo:first", rejected, "echo:third")]
    assert positions == sorted(positions)
    assert_matches_engine(model.trajectory, generate_records(engine))


@pytest.mark.parametrize("enable_thinking", [False, True])
async def test_thinking(start_engine, qwen3, enable_thinking: bool) -> None:  # type: ignore[no-untyped-def]
    reasoning = "<think>\nI should not run " + hermes_call("calculator", expression="1/0") + " yet.\n</think>\n\n"
    engine = start_engine(
        Script(
            turns=[
                Reply(text=(reasoning if enable_thinking else "") + hermes_call("calculator", expression="2 ** 10")),
                Reply(text=("<think>\nDone.\n</think>\n\n" if enable_thinking else "") + "1024"),
            ]
        )
    )
    model = make_model(engine, qwen3, enable_thinking=enable_thinking)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("What is 2 ** 10?")
    trajectory = model.trajectory
    first_prompt = decode(qwen3, trajectory.token_ids[: trajectory.initial_prompt_length])
    assert first_prompt.endswith("<think>\n\n</think>\n\n") is (not enable_thinking)
    # Only the call outside the think block ran.
    tool_uses = [b["toolUse"]["input"] for b in agent.messages[1]["content"] if "toolUse" in b]
    assert tool_uses == [{"expression": "2 ** 10"}]
    assert_matches_engine(trajectory, generate_records(engine))


# Output token sequences that decode-then-encode would change (each case checked against the real Qwen3 vocabulary).
DRIFT_CASES = {
    "tool_call_tag_in_pieces": [27, 14172, 13429, 29],  # "<tool_call>" spelled as plain text pieces
    "double_newline_split": [198, 198],  # "\n" "\n" instead of "\n\n"
    "broken_utf8": [124026, 5394],  # first byte of a 4-byte character, then " ok"
    "non_canonical_merge": [32713, 385],  # "Hel" "lo" instead of "Hello"
}


@pytest.mark.parametrize("case", sorted(DRIFT_CASES))
async def test_drift_cases_are_kept_exactly(start_engine, qwen3, case: str) -> None:  # type: ignore[no-untyped-def]
    drift = DRIFT_CASES[case]
    body = qwen3.encode(hermes_call("calculator", expression="6 * 7")[len("<tool_call>") :], add_special_tokens=False)
    # A tool call whose opening tag is spelled in pieces, so it must still parse from the text; other drift goes first.
    first_output = drift + body + [IM_END] if case == "tool_call_tag_in_pieces" else [*drift, 151657, *body, IM_END]
    # The final answer carries the drift too (a lone "<tool_call>" there would be a malformed call, so not that one).
    final = [*(DRIFT_CASES["non_canonical_merge"] if case == "tool_call_tag_in_pieces" else drift), IM_END]
    engine = start_engine(Script(turns=[Reply(ids=first_output), Reply(ids=final)]))
    model = make_model(engine, qwen3)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("Compute 6 * 7.")

    trajectory = model.trajectory
    assert_matches_engine(trajectory, generate_records(engine))
    outputs = [trajectory.token_ids[t.output_start : t.output_start + t.output_length] for t in trajectory.turns]
    assert outputs == [first_output, final]
    # Re-tokenizing the text would not have given the generated tokens back.
    assert qwen3.encode(decode(qwen3, first_output), add_special_tokens=False) != first_output
    assert agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"] == "42"


async def test_context_window_is_respected(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="short")]), context_length=400)
    model = make_model(engine, qwen3, sampling_params={"max_new_tokens": 10_000})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    [record] = generate_records(engine)
    # max_new_tokens is capped to the room left, read from the server's /v1/models.
    assert record.request["sampling_params"]["max_new_tokens"] == 400 - len(record.input_ids or []) - 1

    # A prompt that does not fit fails before any request, and leaves the trajectory as it was.
    before = model.trajectory.to_dict()
    with pytest.raises(ContextWindowOverflowException):
        await agent.invoke_async("x " * 500)
    assert len(generate_records(engine)) == 1
    assert model.trajectory.to_dict() == before


async def test_server_context_overflow_maps_to_strands(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.context_overflow()]))
    model = make_model(engine, qwen3)
    with pytest.raises(ContextWindowOverflowException, match="context length"):
        await make_agent(model).invoke_async("Hi")
    assert model.trajectory.token_ids == []
    assert [r.status for r in engine.records if r.path == "/generate"] == [400]


@pytest.mark.parametrize("status", [429, 503])
async def test_throttling_is_retried_then_succeeds(start_engine, qwen3, status: int) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(status, count=2), Reply(text="Hello!")]))
    model = make_model(engine, qwen3)
    await make_agent(model).invoke_async("Hi")
    statuses = [r.status for r in engine.records if r.path == "/generate"]
    assert statuses == [status, status, 200]
    assert_matches_engine(model.trajectory, generate_records(engine))
    assert len(model.trajectory.turns) == 1


async def test_throttling_that_never_ends_becomes_model_throttled(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=10)]))
    model = make_model(engine, qwen3, client_kwargs={"max_retries": 2})
    with pytest.raises(ModelThrottledException):
        await make_agent(model).invoke_async("Hi")
    assert len([r for r in engine.records if r.path == "/generate"]) == 3
    assert model.trajectory.token_ids == []


async def test_bad_request_is_not_retried(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="never")]))
    model = make_model(engine, qwen3, sampling_params={"max_new_tokens": 16, "not_a_sampling_param": 1})
    with pytest.raises(Exception, match="400"):
        await make_agent(model).invoke_async("Hi")
    assert len([r for r in engine.records if r.path == "/generate"]) == 1


async def test_abort_is_an_error_not_a_turn(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.abort()]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(SGLangAbortedError):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("missing_output_ids", SGLangResponseError),
        ("logprobs_wrong_length", SGLangResponseError),
        # SGLang's orjson writes a NaN logprob as null: never recorded as a real one (InvalidSampleError).
        ("nan_logprob", SGLangInvalidSampleError),
        ("missing_meta_info", SGLangResponseError),
        ("wrong_types", SGLangResponseError),
        ("non_json", SGLangDecodingError),
        ("truncated_body", SGLangConnectionError),
    ],
)
async def test_malformed_replies_raise_typed_errors(start_engine, qwen3, kind: str, error: type) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.malformed(kind)]))  # type: ignore[arg-type]
    model = make_model(engine, qwen3, client_kwargs={"max_retries": 0})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(error):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before


async def test_malformed_tool_call_becomes_an_error_the_model_sees(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    bad = '<tool_call>\n{"name": "calculator", "arguments": ["1 + 1"]}\n</tool_call>'
    engine = start_engine(
        Script(turns=[Reply(text=bad), Reply(text=hermes_call("calculator", expression="1+1")), Reply(text="2")])
    )
    model = make_model(engine, qwen3)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("1+1?")
    assert model.tool_parse_errors == {"calculator": 1}
    result = agent.messages[2]["content"][0]["toolResult"]
    assert result["status"] == "error"
    text = result["content"][0]["text"]
    assert 'Invalid tool call: "arguments" must be a JSON object' in text and bad in text
    # The model saw exactly that error text in its next prompt.
    turn = model.trajectory.turns[1]
    assert text in decode(qwen3, model.trajectory.token_ids[turn.prompt_start : turn.output_start])
    assert_matches_engine(model.trajectory, generate_records(engine))


async def test_two_agents_share_one_model_concurrently(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(match="alpha", turns=[Reply(text=hermes_call("slow_echo", text="a", delay=0.2)), Reply(text="A done")]),
        Script(match="beta", turns=[Reply(text=hermes_call("slow_echo", text="b", delay=0.0)), Reply(text="B done")]),
    )
    model = make_model(engine, qwen3)
    alpha, beta = make_agent(model, [slow_echo]), make_agent(model, [slow_echo])
    await asyncio.gather(alpha.invoke_async("Task alpha"), beta.invoke_async("Task beta"))
    for agent, marker in ((alpha, "alpha"), (beta, "beta")):
        trajectory = model.trajectory_of(agent)
        assert marker in decode(qwen3, trajectory.token_ids)
        conversation = next(
            r.conversation
            for r in generate_records(engine)
            if r.input_ids == trajectory.token_ids[: trajectory.turns[0].output_start]
        )
        assert_matches_engine(trajectory, generate_records(engine, conversation))


async def test_cancelled_rollout_cancels_its_request(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok"), Reply(text="late", delay=5.0)]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    task = asyncio.create_task(agent.invoke_async("Again"))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(50):
        if any(r.disconnected for r in engine.records):
            break
        await asyncio.sleep(0.05)
    assert [r.disconnected for r in engine.records if r.path == "/generate"] == [False, True]
    assert model.trajectory.to_dict() == before


async def test_cancel_signal_abandons_the_request(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=5.0)]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    task = asyncio.create_task(agent.invoke_async("Hi"))
    await asyncio.sleep(0.5)
    agent.cancel()
    result = await asyncio.wait_for(task, 3)
    assert result.stop_reason == "cancelled"
    assert model.trajectory.token_ids == []


async def test_tool_limiter_stops_on_a_message_boundary(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    call = Reply(text=hermes_call("calculator", expression="1 + 1"))
    engine = start_engine(Script(turns=[call, call, call, Reply(text="done")]))
    model = make_model(engine, qwen3)
    limiter = ToolLimiter(max_tool_iters=2)
    agent = make_agent(model, [calculator], hooks=[limiter])
    with pytest.raises(MaxToolIterationsReachedError):
        await agent.invoke_async("Add things.")
    assert (limiter.tool_iter_count, limiter.tool_call_count) == (2, 2)
    trajectory = model.trajectory
    assert len(trajectory.turns) == 2 and trajectory.segments[-1].is_output
    assert trajectory.token_ids[-1] == IM_END
    assert_matches_engine(trajectory, generate_records(engine))


async def test_tool_limiter_counts_parallel_calls(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    two = Reply(text=hermes_call("calculator", expression="1") + "\n" + hermes_call("calculator", expression="2"))
    engine = start_engine(Script(turns=[two, two]))
    model = make_model(engine, qwen3)
    limiter = ToolLimiter(max_tool_calls=3)
    with pytest.raises(MaxToolCallsReachedError):
        await make_agent(model, [calculator], hooks=[limiter]).invoke_async("Go")
    assert (limiter.tool_iter_count, limiter.tool_call_count) == (2, 4)


async def test_qwen_xml_parser_and_multi_invocation_episode(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    xml = "<tool_call>\n<function=calculator>\n<parameter=expression>\n3 * 3\n</parameter>\n</function>\n</tool_call>"
    engine = start_engine(Script(turns=[Reply(text=xml), Reply(text="9"), Reply(text="You are welcome.")]))
    model = make_model(engine, qwen3)
    model.tool_parser = get_tool_parser("qwen_xml")
    agent = make_agent(model, [calculator])
    await agent.invoke_async("3*3?")
    await agent.invoke_async("Thanks!")
    trajectory = model.trajectory
    assert len(trajectory.turns) == 3
    turn = trajectory.turns[2]
    assert decode(qwen3, trajectory.token_ids[turn.prompt_start : turn.output_start]) == (
        "\n<|im_start|>user\nThanks!<|im_end|>\n<|im_start|>assistant\n"
    )
    assert_matches_engine(trajectory, generate_records(engine))


async def test_reset_starts_a_new_trajectory(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="one"), Reply(text="two")]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("First")
    old = model.trajectory
    model.reset()
    assert model.trajectory.token_ids == []
    await agent.invoke_async("Second")
    assert len(old.turns) == 1 and len(model.trajectory.turns) == 1
    # After a reset the whole conversation so far is the new trajectory's prompt.
    assert "First" in decode(qwen3, model.trajectory.token_ids[: model.trajectory.initial_prompt_length])


async def test_history_rewrite_raises_under_the_raise_policy(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="one"), Reply(text="two")]))
    model = make_model(engine, qwen3, on_rewrite="raise")
    agent = make_agent(model)
    await agent.invoke_async("First")
    agent.messages[1]["content"][0]["text"] = "edited"
    with pytest.raises(HistoryRewrittenError):
        await agent.invoke_async("Second")


async def test_routed_experts_cover_every_position_but_the_last(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]),
        routed_experts=(3, 2, 8),
    )
    model = make_model(engine, qwen3, return_routed_experts=True)
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.trajectory
    routing = trajectory.decode_routed_experts(num_layers=3, top_k=2)
    assert routing.shape == (len(trajectory) - 1, 3, 2)
    assert model.routed_experts == trajectory.routed_experts and len(model.routed_experts) == 2
    requests = [r.request for r in generate_records(engine)]
    assert [q["routed_experts_start_len"] for q in requests] == [0, trajectory.turns[1].prompt_start - 1]
    # The stitched slices equal the routing of the whole final sequence, position by position.
    assert np.array_equal(routing, routed_experts_for(trajectory.token_ids, 0, 3, 2, 8))


async def test_top_p_sets_are_kept_per_token(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    """``return_top_p`` asks for slime's top-p sets; each turn keeps exactly the server's, prompt rows empty."""
    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]))
    model = make_model(engine, qwen3, return_top_p=True, sampling_params={"max_new_tokens": 256, "top_p": 0.9})
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.token_manager
    requests = [r.request for r in generate_records(engine)]
    assert all(q["sampling_params"]["custom_params"] == {"return_top_p_token_ids": True} for q in requests)
    for turn, record in zip(trajectory.turns, generate_records(engine), strict=True):
        meta = record.response["meta_info"]
        ids = np.frombuffer(base64.b64decode(meta["top_p_token_ids"]), dtype="<i4").tolist()
        offsets = np.frombuffer(base64.b64decode(meta["top_p_token_offsets"]), dtype="<i4").tolist()
        assert (list(turn.top_p_token_ids or ()), list(turn.top_p_offsets or ())) == (ids, offsets)
    rows = top_p_rows(trajectory.turns)
    assert rows is not None
    ids, offsets = rows
    assert len(offsets) == len(trajectory) + 1 and offsets[-1] == len(ids)
    for position, masked in enumerate(trajectory.loss_mask):
        kept = ids[offsets[position] : offsets[position + 1]]
        # Generated tokens: the sampled token heads its kept set; prompt and tool tokens: an empty row.
        assert (kept[:1] == [trajectory.token_ids[position]]) if masked else kept == []


async def test_top_p_asked_for_but_not_served_is_a_clear_error(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="2")]))
    model = make_model(engine, qwen3, return_top_p=True)
    real_generate = model.client.generate

    async def without_top_p(*args, **kwargs):  # type: ignore[no-untyped-def]
        reply = await real_generate(*args, **kwargs)
        del reply["meta_info"]["top_p_token_ids"]
        return reply

    model.client.generate = without_top_p  # type: ignore[method-assign]
    with pytest.raises(SGLangResponseError, match="top-p token sets were requested"):
        await make_agent(model).invoke_async("hi")
    assert len(model.token_manager) == 0


async def test_routed_experts_with_a_layout_give_a_compact_npy(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]),
        routed_experts=(3, 2, 300),
    )
    model = make_model(engine, qwen3, return_routed_experts=True, routed_experts_layout=(3, 2, 300))
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.token_manager
    assert {t.routed_experts_layout for t in trajectory.turns} == {(3, 2, 300)}
    routes = np.load(io.BytesIO(base64.b64decode(trajectory.to_dict()["routed_experts"])), allow_pickle=False)
    assert routes.dtype == np.uint16  # 300 experts do not fit uint8
    assert np.array_equal(routes, routed_experts_for(trajectory.token_ids, 0, 3, 2, 300))


class Answer(BaseModel):
    value: int


async def test_structured_output_uses_json_schema(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text='{"value": 42}')]))
    model = make_model(engine, qwen3)
    events = [e async for e in model.structured_output(Answer, [{"role": "user", "content": [{"text": "6*7"}]}])]
    assert events[-1]["output"] == Answer(value=42)
    [record] = generate_records(engine)
    schema = record.request["sampling_params"]["json_schema"]
    assert isinstance(schema, str) and json.loads(schema) == Answer.model_json_schema()
    assert model.trajectory.token_ids == []


async def test_first_prompt_logprobs_are_recorded_when_asked(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="Hello!")]), Script(turns=[Reply(text="Hello!")]))
    default = make_model(engine, qwen3)
    await make_agent(default).invoke_async("Hi")
    asked = make_model(engine, qwen3, first_prompt_logprobs=True)
    await make_agent(asked).invoke_async("Hi")
    off, on = generate_records(engine)
    # Off (the default) the first request asks for none, which keeps the shared prefix cacheable ...
    assert off.request["logprob_start_len"] == -1
    assert set(default.trajectory.logprobs[: default.trajectory.initial_prompt_length]) == {None}
    # ... on, it asks from position 0 as strands-sglang 0.6 does, and records what the server answered.
    assert on.request["logprob_start_len"] == 0
    prompt = asked.trajectory.initial_prompt_length
    served = [entry[0] for entry in on.response["meta_info"]["input_token_logprobs"]]
    assert len(served) == prompt and served[0] is None and None not in served[1:]
    assert asked.trajectory.logprobs[:prompt] == served
    assert_matches_engine(asked.trajectory, [on])
