"""The local engine against SGLang 0.5.23 and vLLM 0.33.0, one test per behaviour, each naming the upstream lines it
follows (read in the wheels: ``pip download --no-deps sglang==0.5.23 vllm==0.33.0``; SGLang paths in the repository's
``python/sglang/...`` form, line numbers from the wheel). A new release is then a diff of those lines to read.

Each behaviour is checked on the wire and, where a provider acts on it, through a real Strands ``Agent`` over HTTP,
so the providers are proven against the shapes real servers send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from strands.types.exceptions import ContextWindowOverflowException
from transformers import PreTrainedTokenizerBase

from strands_tito import (
    SGLangAbortedError,
    SGLangInvalidSampleError,
    VLLMClient,
    VLLMInvalidSampleError,
    VLLMModel,
    spans,
)
from strands_tito.assembly import TrajectoryAssembler
from strands_tito.checks import WeightVersionSpan
from strands_tito.errors import ServerHTTPError
from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script, Speculative

from ..helpers.agents import make_agent, make_model

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
EOS = 151645  # <|im_end|>


@pytest.fixture
def http(start_engine: Any) -> Iterator[Any]:
    clients: list[httpx.Client] = []

    def open_(*scripts: Script, **kwargs: Any) -> tuple[LocalEngine, httpx.Client]:
        engine = start_engine(*scripts, **kwargs)
        clients.append(httpx.Client(base_url=engine.base_url, timeout=10))
        return engine, clients[-1]

    yield open_
    for client in clients:
        client.close()


def generate(client: httpx.Client, input_ids: list[int] = PROMPT, **fields: Any) -> Any:
    return client.post("/generate", json={"input_ids": input_ids, **fields})


# -- finish precedence and trimming ------------------------------------------------------------------------------------


async def test_eos_on_the_last_allowed_token_is_a_clean_stop(start_engine: Any, qwen3: PreTrainedTokenizerBase) -> None:
    """``Req.update_finish_state`` (``srt/managers/schedule_batch.py:2007-2045``) checks stop tokens before the length
    cap, and ``trim_matched_stop`` (``srt/managers/detokenizer_manager.py:194-226``) removes the EOS from the text:
    the agent ends its turn with clean text (a length-first engine gave ``max_tokens`` and ``<|im_end|>``)."""
    answer = qwen3.encode("Hello there", add_special_tokens=False)
    engine = start_engine(Script(turns=[Reply(text="Hello there")]))
    model = make_model(engine, qwen3, sampling_params={"max_new_tokens": len(answer) + 1})
    result = await make_agent(model).invoke_async("Hi")
    assert result.stop_reason == "end_turn"
    assert str(result).strip() == "Hello there"
    turn = model.trajectory.turns[0]
    assert (turn.finish_reason, turn.matched_stop, turn.output_length) == ("stop", EOS, len(answer) + 1)


def test_stop_string_beats_eos_and_token_zero_is_trimmed(http: Any, qwen3: PreTrainedTokenizerBase) -> None:
    """Stop strings before stop tokens (``schedule_batch.py:2029-2033``); ``trim_matched_stop`` tests ``matched is
    None`` (``detokenizer_manager.py:199-201``), so a stop on token id 0 is trimmed; with ``no_stop_trim`` the text is
    cut just after the stop string (``detokenizer_manager.py:207-212``)."""
    there = qwen3.encode(" there", add_special_tokens=False)
    _, client = http(Script([Reply(text="Hello there")]), Script([Reply(ids=[9707, 0, 1052])]))
    body = generate(client, sampling_params={"stop": ["there"]}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "there"}
    assert body["text"] == "Hello "
    assert body["output_ids"][-len(there) :] == there
    body = generate(client, [1, 2, 3], sampling_params={"stop_token_ids": [0]}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 0}
    assert body["output_ids"] == [9707, 0] and body["text"] == qwen3.decode([9707])
    _, client = http(Script([Reply(text="Hello there friend")]))
    body = generate(client, sampling_params={"stop": ["there"], "no_stop_trim": True}).json()
    assert body["text"] == "Hello there"


# -- NaN: null, never NaN; "NaN happened" ----------------------------------------------------------------------------


async def test_a_nan_logprob_arrives_as_null_and_is_never_recorded(
    http: Any, start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """``/generate`` answers through orjson (``srt/entrypoints/http_server.py:987``,
    ``srt/utils/json_response.py:12-17``), which writes NaN and infinities as ``null``. The provider refuses the turn
    with a typed error; the trajectory never holds a missing logprob at a generated token."""
    _, client = http(Script([Fault.malformed(kind, text="abc") for kind in ("nan_logprob", "inf_logprob")]))
    for _ in range(2):
        response = generate(client, return_logprob=True)
        assert b"NaN" not in response.content and b"Infinity" not in response.content
        assert response.json()["meta_info"]["output_token_logprobs"][0][0] is None

    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.malformed("nan_logprob")]))
    model = make_model(engine, qwen3, client_kwargs={"max_retries": 0})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(SGLangInvalidSampleError, match=r"output_token_logprobs\[0\]: logprob is missing"):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before
    assert None not in [lp for lp, mask in zip(before["logprobs"], before["loss_mask"], strict=True) if mask]


async def test_nan_happened_is_a_numerical_failure_not_an_answer(
    http: Any, start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """``_check_vocab_boundary_finish`` (``schedule_batch.py:1977-1993``): an id outside the vocabulary is replaced
    by EOS and the request stops with ``{"type":"stop","matched":"NaN happened"}``; the text keeps the EOS (the string
    is not in it). The provider refuses the turn even without logprobs."""
    bad = len(qwen3) + 5
    _, client = http(Script([Reply(ids=[9707, bad, 1052])]))
    body = generate(client, return_logprob=True, sampling_params={"skip_special_tokens": False}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "NaN happened"}
    assert body["output_ids"] == [9707, EOS]
    assert body["meta_info"]["output_token_logprobs"][1][0] is None
    assert body["text"] == qwen3.decode([9707, EOS])

    engine = start_engine(Script(turns=[Reply(ids=[9707, bad])]))
    model = make_model(engine, qwen3, return_logprob=False, client_kwargs={"max_retries": 0})
    with pytest.raises(SGLangInvalidSampleError, match="NaN happened"):
        await make_agent(model).invoke_async("Hi")
    assert len(model.trajectory) == 0


# -- weight versions ---------------------------------------------------------------------------------------------------


def test_every_finished_reply_carries_weight_version_spans(http: Any) -> None:
    """``add_weight_versions_to_meta_info`` (``srt/utils/weight_versions.py:90-107``), called for every finished
    request (``srt/managers/tokenizer_manager.py:2559-2568``); ``--weight-version`` (``srt/arg_groups/fields/
    serving.py:172-175``); ``POST /update_weight_version`` (``srt/entrypoints/http_server.py:1527-1556``, body
    ``UpdateWeightVersionReqInput``, ``srt/managers/io_struct.py:2155-2159``); ``/model_info`` reports the current
    version, ``/server_info`` the launch value."""
    _, client = http(Script([Reply(text="one")]), Script([Reply(text="two")]), weight_version="base-v0")
    meta = generate(client).json()["meta_info"]
    n = meta["completion_tokens"]
    assert meta["weight_versions"] == [{"version": "base-v0", "start": 0, "end": n}]
    assert meta["weight_version"] == "base-v0"
    answer = client.post("/update_weight_version", json={"new_version": "disk-v2"}).json()
    assert answer == {"success": True, "message": "Weight version updated to disk-v2", "new_version": "disk-v2"}
    assert generate(client, [5, 6]).json()["meta_info"]["weight_versions"][0]["version"] == "disk-v2"
    assert client.get("/model_info").json()["weight_version"] == "disk-v2"
    assert client.get("/server_info").json()["weight_version"] == "base-v0"
    assert client.post("/update_weight_version", json={}).status_code == 400


async def test_a_turn_sampled_by_two_policies_keeps_both_versions(
    start_engine: Any, qwen3: PreTrainedTokenizerBase, memory: Any
) -> None:
    """A weight update that lands while a request runs (``abort_all_requests: false``) gives that reply two spans and
    sets ``weight_version`` to the last (``weight_versions.py:66-107``). Both are kept on the turn, the trajectory,
    the span and the assembled record (a provider that kept only ``weight_version`` labelled every token with the
    newer policy)."""
    engine = start_engine(Script(turns=[Reply(text="first answer"), Reply(text="second answer here", delay=1.0)]))
    engine.core.weight_version = "v0"
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")

    async def update() -> None:
        while not engine.core.busy:  # the second request is running (its delay has begun)
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=engine.base_url) as client:
            body = {"new_version": "v1", "abort_all_requests": False}
            assert (await client.post("/update_weight_version", json=body)).status_code == 200

    await asyncio.gather(agent.invoke_async("Again"), update())
    first, second = model.trajectory.turns
    assert first.weight_versions == (WeightVersionSpan("v0", 0, first.output_length),)
    middle = second.output_length // 2
    assert second.weight_versions == (
        WeightVersionSpan("v0", 0, middle),
        WeightVersionSpan("v1", middle, second.output_length),
    )
    assert second.weight_version == "v1"
    assert model.trajectory.weight_versions[-1] == WeightVersionSpan(
        "v1", second.output_start + middle, second.output_start + second.output_length
    )
    model.reset()
    assembler = TrajectoryAssembler()
    records = []
    for span in memory.get_finished_spans():
        attributes = dict(span.attributes or {})
        if spans.is_tito_span(attributes) and attributes[spans.TRAJECTORY_ID] == model.rollout_history[0].trajectory_id:
            records += assembler.add(spans.decode_span(attributes, span.end_time or 0), trace_id="t")
    (record,) = records
    turns = record.to_dict()["turns"]
    assert turns[1]["weight_versions"] == [
        {"version": "v0", "start": 0, "end": middle},
        {"version": "v1", "start": middle, "end": second.output_length},
    ]


async def test_a_weight_update_aborts_running_requests_by_default(
    start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """``update_weight_version`` calls ``abort_request(abort_all=True)`` first unless told not to
    (``http_server.py:1533-1534``): the running turn becomes an abort, never a recorded answer."""
    engine = start_engine(Script(turns=[Reply(text="slow", delay=2.0)]))
    model = make_model(engine, qwen3, client_kwargs={"max_retries": 0})

    async def update() -> None:
        while not engine.core.busy:
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=engine.base_url) as client:
            await client.post("/update_weight_version", json={"new_version": "v9"})

    with pytest.raises(SGLangAbortedError):
        await asyncio.gather(make_agent(model).invoke_async("Hi"), update())
    assert len(model.trajectory) == 0


# -- speculative decoding ----------------------------------------------------------------------------------------------


def test_speculative_servers_reserve_context(http: Any) -> None:
    """``compute_num_reserved_tokens`` (``srt/managers/utils.py:484-500``): R = max(topk x steps, draft tokens) for
    EAGLE-like algorithms; ``_validate_one_request`` (``srt/managers/tokenizer_manager.py:1333-1378``) adds R to the
    prompt, in the checks and in the message, and refuses a total strictly above the context."""
    spec = Speculative("EAGLE", speculative_eagle_topk=2, speculative_num_steps=3, speculative_num_draft_tokens=4)
    _, client = http(Script([Reply(text="ok")]), context_length=64, speculative=spec)
    info = client.get("/server_info").json()
    assert (info["speculative_algorithm"], info["speculative_eagle_topk"], info["speculative_num_steps"]) == (
        "EAGLE",
        2,
        3,
    )
    assert generate(client, [1] * 9, sampling_params={"max_new_tokens": 64 - 9 - 6}).status_code == 200
    response = generate(client, [1] * 9, sampling_params={"max_new_tokens": 64 - 9 - 5})
    assert response.status_code == 400
    assert (
        "You requested a total of 65 tokens: 15 tokens from the input messages" in response.json()["error"]["message"]
    )
    assert Speculative("NGRAM").reserved_tokens == 0 and Speculative("NEXTN").reserved_tokens == 4


async def test_the_provider_sizes_max_new_tokens_for_a_speculative_server(
    start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """A default request (no ``max_new_tokens`` configured: the room left in the window) must not be refused by a
    server that reserves R tokens (``tokenizer_manager.py:1357``): the provider reads R from ``/server_info``."""
    spec = Speculative("EAGLE3", speculative_eagle_topk=1, speculative_num_steps=5, speculative_num_draft_tokens=6)
    engine = start_engine(Script(turns=[Reply(text="fine")]), context_length=512, speculative=spec)
    model = make_model(engine, qwen3, sampling_params={})
    result = await make_agent(model).invoke_async("Hi")
    assert result.stop_reason == "end_turn" and model.trajectory.turns[0].finish_reason == "stop"
    sent = next(r for r in engine.records if r.path == "/generate").request
    assert (
        len(model.trajectory.token_ids[: model.trajectory.turns[0].output_start])
        + 6
        + (sent["sampling_params"]["max_new_tokens"])
        <= 512
    )


# -- errors and aborts -------------------------------------------------------------------------------------------------


async def test_the_kv_budget_400_is_a_context_overflow(start_engine: Any, qwen3: PreTrainedTokenizerBase) -> None:
    """The scheduler aborts a prompt the KV pool cannot hold (``srt/managers/scheduler.py:2722-2735``) with
    ``set_finish_with_abort``'s default status 400 (``schedule_batch.py:2221-2226``): deterministic, so the agent
    gets ``ContextWindowOverflowException`` rather than retries."""
    engine = start_engine(Script(turns=[Fault.context_overflow("kv_budget")]))
    model = make_model(engine, qwen3)
    with pytest.raises(ContextWindowOverflowException, match="KV memory budget"):
        await make_agent(model).invoke_async("Hi")
    assert len([r for r in engine.records if r.path == "/generate"]) == 1  # not retried


async def test_waiting_queue_abort_shape(http: Any, start_engine: Any, qwen3: PreTrainedTokenizerBase) -> None:
    """A request aborted before it leaves the waiting queue (``srt/managers/tokenizer_manager.py:3590-3640``):
    ``{"type":"abort","message":"Abort in waiting queue"}`` and a ``meta_info`` without ``prompt_tokens`` or
    ``cached_tokens``, with ``weight_version``, ``weight_versions``, ``e2e_latency`` and ``completion_tokens``."""
    _, client = http(Script([Fault.abort(waiting=True)]))
    meta = generate(client).json()["meta_info"]
    assert meta["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
    assert "prompt_tokens" not in meta and "cached_tokens" not in meta
    assert {"weight_version", "weight_versions", "e2e_latency", "completion_tokens"} <= set(meta)

    engine, client = http(Script([Reply(text="late")]))
    client.post("/pause_generation", json={"mode": "in_place"})
    async with httpx.AsyncClient(base_url=engine.base_url) as aclient:
        pending = asyncio.ensure_future(aclient.post("/generate", json={"input_ids": PROMPT, "rid": "r1"}))
        await asyncio.sleep(0.2)
        await aclient.post("/abort_request", json={"rid": "r1"})
        meta = (await pending).json()["meta_info"]
    assert meta["finish_reason"]["message"] == "Abort in waiting queue" and "prompt_tokens" not in meta

    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.abort(waiting=True)]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    before = model.trajectory.to_dict()
    with pytest.raises(SGLangAbortedError, match="waiting queue"):
        await agent.invoke_async("Again")
    assert model.trajectory.to_dict() == before


async def test_cached_tokens_leave_out_the_last_sampled_token(
    http: Any, start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """A finished request caches its KV up to ``kv_committed_len``: the last sampled token has none, and the match
    is capped at ``min(len(prompt) - 1, logprob_start_len)`` (``Req._compute_max_prefix_len``,
    ``schedule_batch.py:1766-1776``)."""
    _, client = http(Script(turns=[Reply(text="one"), Reply(text="two")]))
    body = generate(client).json()
    history = PROMPT + body["output_ids"]
    assert generate(client, [*history, 5]).json()["meta_info"]["cached_tokens"] == len(history) - 1

    engine = start_engine(Script(turns=[Reply(text="one"), Reply(text="two")]))
    model = make_model(engine, qwen3)
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    await agent.invoke_async("Again")
    first, second = model.trajectory.turns
    assert second.cached_tokens <= first.output_start + first.output_length - 1


# -- vLLM 0.33 ---------------------------------------------------------------------------------------------------------


def _vllm(engine: LocalEngine, tokenizer: PreTrainedTokenizerBase, endpoint: str) -> VLLMModel:
    client = VLLMClient(engine.base_url, backoff_base=0.01, backoff_max=0.05, max_retries=0)
    return VLLMModel(tokenizer=tokenizer, client=client, endpoint=endpoint, sampling_params={"max_tokens": 64})


@pytest.mark.parametrize("endpoint", ["generate", "completions"])
async def test_vllm_repetition_finish_is_an_answer(
    start_engine: Any, qwen3: PreTrainedTokenizerBase, endpoint: str
) -> None:
    """``FINISH_REASON_STRINGS`` includes ``"repetition"`` (``vllm/v1/engine/__init__.py:37``), with ``stop_reason``
    ``"repetition_detected"`` (``vllm/v1/core/sched/utils.py:128-137``): real model output, so a recorded stop turn
    and ``end_turn`` for the agent (it was a protocol error, and the turn lost)."""
    engine = start_engine(Script(turns=[Reply(text="la la la", eos=False, finish={"type": "repetition"})]))
    model = _vllm(engine, qwen3, endpoint)
    result = await make_agent(model).invoke_async("Hi")  # type: ignore[arg-type]
    assert result.stop_reason == "end_turn"
    turn = model.trajectory.turns[0]
    assert (turn.finish_reason, turn.matched_stop) == ("stop", "repetition_detected")
    assert str(result).strip() == "la la la"


@pytest.mark.parametrize(
    ("endpoint", "kind"), [("generate", "nan_logprob"), ("generate", "inf_logprob"), ("completions", "inf_logprob")]
)
async def test_vllm_logprob_floor_is_refused_not_recorded(
    start_engine: Any, qwen3: PreTrainedTokenizerBase, endpoint: str, kind: str
) -> None:
    """vLLM writes ``-9999.0`` where a generated token's logprob is missing or not finite: the tokens endpoint's
    ``_clamp_logprob`` and its sentinel for a token without a logprob entry (``entrypoints/scale_out/
    token_in_token_out/serving.py:85-91, 895-901``), ``/v1/completions``' ``max(logprob, -9999.0)``
    (``entrypoints/openai/completion/serving.py:765``, ``-inf`` only). The provider refuses the turn; nothing is
    recorded."""
    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.malformed(kind)]))  # type: ignore[arg-type]
    model = _vllm(engine, qwen3, endpoint)
    agent = make_agent(model)
    await agent.invoke_async("Hi")  # type: ignore[arg-type]
    before = model.trajectory.to_dict()
    with pytest.raises(VLLMInvalidSampleError, match=r"logprob -9999.0 is vLLM's value"):
        await agent.invoke_async("Again")  # type: ignore[arg-type]
    assert model.trajectory.to_dict() == before


async def test_vllm_completions_answers_a_nan_logprob_with_a_400(
    http: Any, start_engine: Any, qwen3: PreTrainedTokenizerBase
) -> None:
    """On ``/v1/completions`` vLLM floors only ``-inf`` (``max(nan, -9999.0)`` stays NaN,
    ``entrypoints/openai/completion/serving.py:765, 783``); Starlette's ``JSONResponse`` then refuses to render the
    NaN with a ``ValueError``, which vLLM's fallback handler answers as a 400 ``BadRequestError`` carrying the message
    (``entrypoints/serve/exception_handling/register.py:36``, ``error_response.py:80-83``). The user sees that 400
    named as a NaN logprob (in the retry log, or raised once retries are spent, as here), and the trajectory keeps
    every earlier turn and nothing of this one."""
    request = {"prompt": PROMPT, "max_tokens": 8, "logprobs": 0, "return_token_ids": True}
    _, client = http(Script([Fault.malformed("nan_logprob", text="abc")]))
    response = client.post("/v1/completions", json=request)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("BadRequestError", None, 400)
    assert error["message"].startswith("Out of range float values are not JSON compliant")

    engine = start_engine(Script(turns=[Reply(text="ok"), Fault.malformed("nan_logprob")]))
    model = _vllm(engine, qwen3, "completions")
    agent = make_agent(model)  # type: ignore[arg-type]
    await agent.invoke_async("Hi")  # type: ignore[arg-type]
    before = model.trajectory.to_dict()
    with pytest.raises(ServerHTTPError, match=r"HTTP 400: .*the sampled tokens had a NaN logprob") as raised:
        await agent.invoke_async("Again")  # type: ignore[arg-type]
    assert raised.value.status == 400
    assert model.trajectory.to_dict() == before
    assert [r.status for r in engine.records if r.path == "/v1/completions"] == [200, 400]


@pytest.mark.parametrize("endpoint", ["generate", "completions"])
async def test_vllm_weight_versions_reach_the_turn(
    start_engine: Any, qwen3: PreTrainedTokenizerBase, endpoint: str
) -> None:
    """The tokens endpoint always sends ``choices[].weight_versions`` (``entrypoints/scale_out/token_in_token_out/
    serving.py:502, 736``); ``/v1/completions`` does when asked with ``return_weight_versions``
    (``entrypoints/openai/completion/protocol.py:182-189``, ``completion/serving.py:650-654``). Both become the same
    runs as SGLang's (they were joined into ``"v0,v1"``, or missing on the completions path)."""
    engine = start_engine(Script(turns=[Reply(text="hello")]), weight_version="w3")
    model = _vllm(engine, qwen3, endpoint)
    await make_agent(model).invoke_async("Hi")  # type: ignore[arg-type]
    turn = model.trajectory.turns[0]
    assert turn.weight_versions == (WeightVersionSpan("w3", 0, turn.output_length),)
    assert turn.weight_version == "w3"
    if endpoint == "completions":
        request = next(r for r in engine.records if r.path == "/v1/completions").request
        assert request["return_weight_versions"] is True
