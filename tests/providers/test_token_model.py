"""What both providers share (``TokenModel``), run once per backend: SGLang's ``/generate``, vLLM's
``/inference/v1/generate`` and vLLM's ``/v1/completions`` fallback, each against the local engine over real HTTP on
127.0.0.1 with real Strands agents and real tools.

The central assertion everywhere: the trajectory equals, token for token, what the engine received and produced.
What only one backend does is tested in its own file (``test_sglang_model.py``, ``test_vllm_model.py``).
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException
from transformers import PreTrainedTokenizerBase

from strands_tito import (
    HistoryRewrittenError,
    MaxToolCallsReachedError,
    MaxToolIterationsReachedError,
    SGLangAbortedError,
    SGLangClient,
    SGLangConnectionError,
    SGLangDecodingError,
    SGLangHTTPError,
    SGLangInvalidSampleError,
    SGLangModel,
    SGLangResponseError,
    ToolLimiter,
    VLLMAbortedError,
    VLLMClient,
    VLLMInvalidSampleError,
    VLLMModel,
    VLLMResponseError,
    get_tool_parser,
)
from strands_tito.providers.token_model import TokenModel
from strands_tito.testing.engine import EngineRecord, Fault, LocalEngine, Reply, Script, routed_experts_for

from ..helpers.agents import (
    DRIFT_CASES,
    IM_END,
    assert_matches_engine,
    calculator,
    decode,
    fast_client,
    hermes_call,
    make_agent,
    slow_echo,
)
from ..helpers.moe import moe_model_dir

#: Malformed reply kinds the engine serves (``Fault.malformed``).
MALFORMED = ("missing_output_ids", "logprobs_wrong_length", "nan_logprob", "missing_meta_info", "wrong_types")


@dataclass(frozen=True)
class Backend:
    """One backend as the shared suite drives it: how to build its model, where its requests go, what it raises."""

    id: str
    name: str  # as its messages name it
    route: str  # the generation route the engine records
    prompt_key: str  # the request field that carries the prompt's token ids
    max_tokens_key: str
    reserved_positions: int  # positions held back after prompt + max tokens
    probes: frozenset[str]  # every other route the provider asks
    response_error: type[Exception]
    invalid_sample_error: type[Exception]
    aborted_error: type[Exception]
    invalid_sampling: dict[str, Any]  # a sampling value the server refuses with a 400 a retry cannot fix
    context_hint: str  # what the context-overflow error adds
    schema_of: Callable[[dict[str, Any]], Any]  # the JSON schema a structured-output request carries
    malformed: dict[str, str]  # what the error for each malformed reply kind says
    config: dict[str, Any] = field(default_factory=dict)
    # The error a NaN logprob gives where the server answers it with an error status (None: a refused sample).
    nan_logprob_error: tuple[type[Exception], str] | None = None

    def model(self, engine: LocalEngine, tokenizer: PreTrainedTokenizerBase, **config: Any) -> TokenModel:
        """The backend's model on ``engine`` with a fast-retry client."""
        client_kwargs = config.pop("client_kwargs", {})
        config.setdefault("sampling_params", {self.max_tokens_key: 256})
        if self.id == "sglang":
            return SGLangModel(client=fast_client(engine, SGLangClient, **client_kwargs), tokenizer=tokenizer, **config)
        client = fast_client(engine, VLLMClient, **client_kwargs)
        return VLLMModel(client=client, tokenizer=tokenizer, **{**self.config, **config})

    def records(self, engine: LocalEngine, conversation: int | None = None) -> list[EngineRecord]:
        """Successful generation requests, optionally of one engine conversation."""
        return [
            r
            for r in engine.records
            if r.path == self.route
            and r.status == 200
            and r.output_ids is not None
            and r.fault is None
            and (conversation is None or r.conversation == conversation)
        ]

    def statuses(self, engine: LocalEngine) -> list[int]:
        """The status of every generation request, in order."""
        return [r.status for r in engine.records if r.path == self.route]


SGLANG = Backend(
    id="sglang",
    name="SGLang",
    route="/generate",
    prompt_key="input_ids",
    max_tokens_key="max_new_tokens",
    reserved_positions=1,
    probes=frozenset({"/v1/models", "/server_info"}),
    response_error=SGLangResponseError,
    invalid_sample_error=SGLangInvalidSampleError,
    aborted_error=SGLangAbortedError,
    invalid_sampling={"not_a_sampling_param": 1},
    context_hint="context length",
    schema_of=lambda request: json.loads(request["sampling_params"]["json_schema"]),
    malformed={
        "missing_output_ids": "/generate reply has no output_ids",
        "logprobs_wrong_length": "output_token_logprobs: expected 3 entries, got 2",
        "nan_logprob": "logprob is missing \\(null",
        "missing_meta_info": "/generate reply has no meta_info",
        "wrong_types": "/generate reply has no output_ids list of token ids",
    },
)
VLLM = Backend(
    id="vllm",
    name="vLLM",
    route="/inference/v1/generate",
    prompt_key="token_ids",
    max_tokens_key="max_tokens",
    reserved_positions=0,
    probes=frozenset({"/v1/models"}),
    response_error=VLLMResponseError,
    invalid_sample_error=VLLMInvalidSampleError,
    aborted_error=VLLMAbortedError,
    invalid_sampling={"max_tokens": -1},
    context_hint="--max-model-len",
    schema_of=lambda request: request["sampling_params"]["structured_outputs"]["json"],
    malformed={
        "missing_output_ids": "reply has no token_ids|predates return_token_ids",
        "logprobs_wrong_length": "expected 3 entries, got 2",
        "nan_logprob": "logprob -9999.0 is vLLM's value",
        "missing_meta_info": "reply has no single choice",
        "wrong_types": "token_ids is not a list of token ids",
    },
)
VLLM_COMPLETIONS = replace(
    VLLM,
    id="vllm-completions",
    route="/v1/completions",
    prompt_key="prompt",
    schema_of=lambda request: request["structured_outputs"]["json"],
    config={"endpoint": "completions"},
    # vLLM 0.33 cannot write a NaN logprob as JSON there and answers 400 (docs/providers.md).
    nan_logprob_error=(SGLangHTTPError, r"^vLLM \(POST /v1/completions\) returned HTTP 400: .*had a NaN logprob"),
)


@pytest.fixture(params=[SGLANG, VLLM, VLLM_COMPLETIONS], ids=lambda b: b.id)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


# -- a rollout is recorded exactly ------------------------------------------------------------------------------------


async def test_multi_turn_tool_use_is_recorded_exactly(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(
            turns=[
                Reply(text=hermes_call("calculator", expression="25 * 17")),
                Reply(text=hermes_call("calculator", expression="425 + 1")),
                Reply(text="The answer is 426."),
            ]
        )
    )
    model = backend.model(engine, qwen3)
    agent = make_agent(model, [calculator])
    result = await agent.invoke_async("What is 25 * 17 + 1?")
    assert "426" in str(result)

    records = backend.records(engine)
    trajectory = model.trajectory
    assert_matches_engine(trajectory, records)
    assert [t.finish_reason for t in trajectory.turns] == ["stop"] * 3
    assert [t.matched_stop for t in trajectory.turns] == [IM_END] * 3
    assert trajectory.token_ids[trajectory.turns[0].output_start - 1] != IM_END
    # The tool result reached the model as tokens, exactly as the template renders it.
    second_prompt = trajectory.token_ids[trajectory.turns[1].prompt_start : trajectory.turns[1].output_start]
    assert decode(qwen3, second_prompt) == (
        "\n<|im_start|>user\n<tool_response>\n425\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # Token ids went out as token ids, one request per turn, on the backend's own routes and no other.
    assert [r.request[backend.prompt_key] for r in records] == [r.input_ids for r in records]
    assert {r.path for r in engine.records} == {backend.route, *backend.probes}
    assert trajectory.segment_info == [(i % 2 == 1, s.length) for i, s in enumerate(trajectory.segments)]


async def test_parallel_tool_results_follow_call_order(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    calls = [
        hermes_call("slow_echo", text="first", delay=0.2),
        hermes_call("not a valid name!"),
        hermes_call("slow_echo", text="third", delay=0),
    ]
    engine = start_engine(Script(turns=[Reply(text="\n".join(calls)), Reply(text="All done.")]))
    model = backend.model(engine, qwen3)
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
    assert_matches_engine(model.trajectory, backend.records(engine))


@pytest.mark.parametrize("enable_thinking", [False, True])
async def test_thinking(start_engine, qwen3, backend: Backend, enable_thinking: bool) -> None:  # type: ignore[no-untyped-def]
    reasoning = "<think>\nI should not run " + hermes_call("calculator", expression="1/0") + " yet.\n</think>\n\n"
    engine = start_engine(
        Script(
            turns=[
                Reply(text=(reasoning if enable_thinking else "") + hermes_call("calculator", expression="2 ** 10")),
                Reply(text=("<think>\nDone.\n</think>\n\n" if enable_thinking else "") + "1024"),
            ]
        )
    )
    model = backend.model(engine, qwen3, enable_thinking=enable_thinking)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("What is 2 ** 10?")
    trajectory = model.trajectory
    first_prompt = decode(qwen3, trajectory.token_ids[: trajectory.initial_prompt_length])
    assert first_prompt.endswith("<think>\n\n</think>\n\n") is (not enable_thinking)
    # Only the call outside the think block ran.
    tool_uses = [b["toolUse"]["input"] for b in agent.messages[1]["content"] if "toolUse" in b]
    assert tool_uses == [{"expression": "2 ** 10"}]
    assert_matches_engine(trajectory, backend.records(engine))


@pytest.mark.parametrize("case", sorted(DRIFT_CASES))
async def test_drift_cases_are_kept_exactly(start_engine, qwen3, backend: Backend, case: str) -> None:  # type: ignore[no-untyped-def]
    drift = DRIFT_CASES[case]
    body = qwen3.encode(hermes_call("calculator", expression="6 * 7")[len("<tool_call>") :], add_special_tokens=False)
    # A tool call whose opening tag is spelled in pieces, so it must still parse from the text; other drift goes first.
    first_output = drift + body + [IM_END] if case == "tool_call_tag_in_pieces" else [*drift, 151657, *body, IM_END]
    # The final answer carries the drift too (a lone "<tool_call>" there would be a malformed call, so not that one).
    final = [*(DRIFT_CASES["non_canonical_merge"] if case == "tool_call_tag_in_pieces" else drift), IM_END]
    engine = start_engine(Script(turns=[Reply(ids=first_output), Reply(ids=final)]))
    model = backend.model(engine, qwen3)
    agent = make_agent(model, [calculator])
    await agent.invoke_async("Compute 6 * 7.")

    trajectory = model.trajectory
    assert_matches_engine(trajectory, backend.records(engine))
    outputs = [trajectory.token_ids[t.output_start : t.output_start + t.output_length] for t in trajectory.turns]
    assert outputs == [first_output, final]
    # Re-tokenizing the text would not have given the generated tokens back.
    assert qwen3.encode(decode(qwen3, first_output), add_special_tokens=False) != first_output
    assert agent.messages[2]["content"][0]["toolResult"]["content"][0]["text"] == "42"


async def test_two_agents_share_one_model_concurrently(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(match="alpha", turns=[Reply(text=hermes_call("slow_echo", text="a", delay=0.2)), Reply(text="A done")]),
        Script(match="beta", turns=[Reply(text=hermes_call("slow_echo", text="b", delay=0.0)), Reply(text="B done")]),
    )
    model = backend.model(engine, qwen3)
    alpha, beta = make_agent(model, [slow_echo]), make_agent(model, [slow_echo])
    await asyncio.gather(alpha.invoke_async("Task alpha"), beta.invoke_async("Task beta"))
    for agent, marker in ((alpha, "alpha"), (beta, "beta")):
        trajectory = model.trajectory_of(agent)
        assert marker in decode(qwen3, trajectory.token_ids)
        conversation = next(
            r.conversation
            for r in backend.records(engine)
            if r.input_ids == trajectory.token_ids[: trajectory.turns[0].output_start]
        )
        assert_matches_engine(trajectory, backend.records(engine, conversation))


async def test_malformed_tool_call_becomes_an_error_the_model_sees(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    bad = '<tool_call>\n{"name": "calculator", "arguments": ["1 + 1"]}\n</tool_call>'
    engine = start_engine(
        Script(turns=[Reply(text=bad), Reply(text=hermes_call("calculator", expression="1+1")), Reply(text="2")])
    )
    model = backend.model(engine, qwen3)
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
    assert_matches_engine(model.trajectory, backend.records(engine))


async def test_qwen_xml_parser_and_multi_invocation_episode(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    xml = "<tool_call>\n<function=calculator>\n<parameter=expression>\n3 * 3\n</parameter>\n</function>\n</tool_call>"
    engine = start_engine(Script(turns=[Reply(text=xml), Reply(text="9"), Reply(text="You are welcome.")]))
    model = backend.model(engine, qwen3)
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
    assert_matches_engine(trajectory, backend.records(engine))


async def test_routed_experts_cover_every_position_but_the_last(
    start_engine, qwen3, backend: Backend, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Each turn keeps the routing of its new positions; stitched, they equal the engine's routing of the whole
    sequence, and so does the ``.npy`` a trainer gets."""
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]),
        routed_experts=(3, 2, 8),
        model_path=str(moe_model_dir(tmp_path / "moe", (3, 2, 8))),  # SGLang: the layout is read from its config
    )
    model = backend.model(engine, qwen3, return_routed_experts=True)
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.trajectory
    expected = routed_experts_for(trajectory.token_ids, 0, 3, 2, 8)
    routing = trajectory.decode_routed_experts(num_layers=3, top_k=2)
    assert routing.shape == (len(trajectory) - 1, 3, 2)
    assert np.array_equal(routing, expected)
    assert model.routed_experts == trajectory.routed_experts and len(model.routed_experts) == 2
    if backend is not SGLANG:  # vLLM's .npy knows its layout; SGLang's needs routed_experts_layout (its own file)
        routes = np.load(io.BytesIO(base64.b64decode(trajectory.to_dict()["routed_experts"])), allow_pickle=False)
        assert routes.dtype == np.uint8 and np.array_equal(routes, expected)


# -- episodes: reset, rewrites, limits, structured output ------------------------------------------------------------


async def test_reset_starts_a_new_trajectory(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="one"), Reply(text="two")]))
    model = backend.model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("First")
    old = model.trajectory
    model.reset()
    assert model.trajectory.token_ids == []
    await agent.invoke_async("Second")
    assert len(old.turns) == 1 and len(model.trajectory.turns) == 1
    assert model.rollout_history == [old]
    # After a reset the whole conversation so far is the new trajectory's prompt.
    assert "First" in decode(qwen3, model.trajectory.token_ids[: model.trajectory.initial_prompt_length])


async def test_history_rewrite_raises_under_the_raise_policy(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="one"), Reply(text="two")]))
    model = backend.model(engine, qwen3, on_rewrite="raise")
    agent = make_agent(model)
    await agent.invoke_async("First")
    agent.messages[1]["content"][0]["text"] = "edited"
    with pytest.raises(HistoryRewrittenError):
        await agent.invoke_async("Second")
    assert len(backend.records(engine)) == 1


async def test_tool_limiter_stops_on_a_message_boundary(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    call = Reply(text=hermes_call("calculator", expression="1 + 1"))
    engine = start_engine(Script(turns=[call, call, call, Reply(text="done")]))
    model = backend.model(engine, qwen3)
    limiter = ToolLimiter(max_tool_iters=2)
    agent = make_agent(model, [calculator], hooks=[limiter])
    with pytest.raises(MaxToolIterationsReachedError):
        await agent.invoke_async("Add things.")
    assert (limiter.tool_iter_count, limiter.tool_call_count) == (2, 2)
    trajectory = model.trajectory
    assert len(trajectory.turns) == 2 and trajectory.segments[-1].is_output
    assert trajectory.token_ids[-1] == IM_END
    assert_matches_engine(trajectory, backend.records(engine))


async def test_tool_limiter_counts_parallel_calls(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    two = Reply(text=hermes_call("calculator", expression="1") + "\n" + hermes_call("calculator", expression="2"))
    engine = start_engine(Script(turns=[two, two]))
    model = backend.model(engine, qwen3)
    limiter = ToolLimiter(max_tool_calls=3)
    with pytest.raises(MaxToolCallsReachedError):
        await make_agent(model, [calculator], hooks=[limiter]).invoke_async("Go")
    assert (limiter.tool_iter_count, limiter.tool_call_count) == (2, 4)


class Answer(BaseModel):
    value: int


async def test_structured_output_constrains_to_the_schema(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text='{"value": 42}')]))
    model = backend.model(engine, qwen3)
    events = [e async for e in model.structured_output(Answer, [{"role": "user", "content": [{"text": "6*7"}]}])]
    assert events[-1]["output"] == Answer(value=42)
    [record] = backend.records(engine)
    assert backend.schema_of(record.request) == Answer.model_json_schema()
    assert model.trajectory.token_ids == []  # not part of any trajectory


# -- limits and server failures ---------------------------------------------------------------------------------------


async def test_context_window_is_respected(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="short")]), context_length=400)
    model = backend.model(engine, qwen3, sampling_params={backend.max_tokens_key: 10_000})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    [record] = backend.records(engine)
    # The token cap is fitted to the room left, read from the server's /v1/models (SGLang keeps one position free).
    sampling = record.request if backend is VLLM_COMPLETIONS else record.request["sampling_params"]
    assert sampling[backend.max_tokens_key] == 400 - len(record.input_ids or []) - backend.reserved_positions

    # A prompt that does not fit fails before any request, and leaves the trajectory as it was.
    before = model.trajectory.to_dict()
    with pytest.raises(ContextWindowOverflowException):
        await agent.invoke_async("x " * 500)
    assert len(backend.records(engine)) == 1
    assert model.trajectory.to_dict() == before


async def test_server_context_overflow_maps_to_strands(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.context_overflow()]))
    model = backend.model(engine, qwen3)
    message = f"^{backend.name} \\(POST {backend.route}\\) returned HTTP 400.*{backend.context_hint}"
    with pytest.raises(ContextWindowOverflowException, match=message):
        await make_agent(model).invoke_async("Hi")
    assert model.trajectory.token_ids == []
    assert backend.statuses(engine) == [400]


@pytest.mark.parametrize("status", [429, 503])
async def test_throttling_is_retried_then_succeeds(start_engine, qwen3, caplog, backend: Backend, status: int) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(status, count=2), Reply(text="Hello!")]))
    model = backend.model(engine, qwen3)
    with caplog.at_level(logging.WARNING, logger="strands_tito.providers.client"):
        await make_agent(model).invoke_async("Hi")
    assert backend.statuses(engine) == [status, status, 200]
    assert_matches_engine(model.trajectory, backend.records(engine))
    assert len(model.trajectory.turns) == 1
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2 and all(m.endswith(f"| retrying {backend.name} request") for m in retries)


async def test_throttling_that_never_ends_becomes_model_throttled(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=10)]))
    model = backend.model(engine, qwen3, client_kwargs={"max_retries": 2})
    with pytest.raises(ModelThrottledException, match=f"^{backend.name} \\(POST {backend.route}\\) returned HTTP 503"):
        await make_agent(model).invoke_async("Hi")
    assert backend.statuses(engine) == [503] * 3
    assert model.trajectory.token_ids == []


async def test_bad_request_is_not_retried(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="never")]))
    model = backend.model(engine, qwen3, sampling_params={backend.max_tokens_key: 16, **backend.invalid_sampling})
    with pytest.raises(SGLangHTTPError, match=f"^{backend.name} \\(POST {backend.route}\\) returned HTTP 400"):
        await make_agent(model).invoke_async("Hi")
    assert backend.statuses(engine) == [400]


async def test_abort_is_an_error_not_a_turn(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.abort(text="partial")]))
    model = backend.model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(backend.aborted_error, match=f"^{backend.name}: generation aborted by the server"):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before


@pytest.mark.parametrize("kind", [*MALFORMED, "non_json", "truncated_body"])
async def test_malformed_replies_raise_typed_errors(start_engine, qwen3, backend: Backend, kind: str) -> None:  # type: ignore[no-untyped-def]
    """Nothing of a reply that breaks the protocol is recorded; the error says what was wrong and who sent it."""
    errors: dict[str, tuple[type[Exception], str]] = {
        **{k: (backend.response_error, f"^{backend.name}: .*({backend.malformed[k]})") for k in MALFORMED},
        # SGLang writes a NaN logprob as null, vLLM's tokens endpoint as its -9999.0 floor: never recorded as a real
        # one; vLLM's /v1/completions answers 400.
        "nan_logprob": backend.nan_logprob_error
        or (backend.invalid_sample_error, f"^{backend.name}: .*{backend.malformed['nan_logprob']}"),
        "non_json": (SGLangDecodingError, f"^{backend.name} \\(POST {backend.route}\\): .*not JSON"),
        "truncated_body": (SGLangConnectionError, f"^{backend.name} \\(POST .*{backend.route}\\) failed"),
    }
    error, message = errors[kind]
    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.malformed(kind)]))  # type: ignore[arg-type]
    model = backend.model(engine, qwen3, client_kwargs={"max_retries": 0})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(error, match=message):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before


# -- cancellation ----------------------------------------------------------------------------------------------------


async def test_cancelled_rollout_cancels_its_request(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok"), Reply(text="late", delay=5.0)]))
    model = backend.model(engine, qwen3)
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
    assert [r.disconnected for r in engine.records if r.path == backend.route] == [False, True]
    assert model.trajectory.to_dict() == before


async def test_cancel_signal_abandons_the_request(start_engine, qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=5.0)]))
    model = backend.model(engine, qwen3)
    agent = make_agent(model)
    task = asyncio.create_task(agent.invoke_async("Hi"))
    await asyncio.sleep(0.5)
    agent.cancel()
    result = await asyncio.wait_for(task, 3)
    assert result.stop_reason == "cancelled"
    assert model.trajectory.token_ids == []
    for _ in range(50):
        if any(r.disconnected for r in engine.records):
            break
        await asyncio.sleep(0.05)
    assert [r.disconnected for r in engine.records if r.path == backend.route] == [True]


def test_a_client_of_the_other_backend_is_refused(qwen3, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    """An SGLangModel on a VLLMClient would post SGLang's fields to vLLM's routes (and the reverse): refused at once."""
    wrong = VLLMClient if backend is SGLANG else SGLangClient
    model_type = SGLangModel if backend is SGLANG else VLLMModel
    with pytest.raises(TypeError, match=f"speaks {backend.name}: client= must be a .*not a {wrong.__name__}"):
        model_type(tokenizer=qwen3, client=wrong("http://127.0.0.1:9"))
