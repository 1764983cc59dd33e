"""The local engine's ``/v1/chat/completions``: vLLM and SGLang shapes, token ids, streaming, tools, errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script
from strands_tito.testing.engine.cli import build_parser
from strands_tito.testing.engine.openai_chat import SGLANG_STREAM_TOKEN_IDS_MESSAGE, parse_chat_request
from strands_tito.testing.engine.protocol import token_logprob

from ..helpers.agents import CALCULATOR_TOOLS, IM_END, hermes_call

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 6 * 7."}]


def post(engine: LocalEngine, **body: Any) -> httpx.Response:
    body.setdefault("model", "m")
    body.setdefault("messages", MESSAGES)
    return httpx.post(engine.base_url + "/v1/chat/completions", json=body, timeout=10)


def events(response: httpx.Response) -> list[Any]:
    assert response.headers["content-type"].startswith("text/event-stream")
    out: list[Any] = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def rendered(qwen3: Any, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    text = qwen3.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(qwen3.encode(text, add_special_tokens=False))


def test_vllm_non_streaming_shape_and_token_ids(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="It is 42.")]), openai_flavor="vllm")
    body = post(engine, return_token_ids=True).json()
    [record] = engine.chat_records()
    assert record.input_ids == rendered(qwen3, MESSAGES)
    assert record.output_ids == [*qwen3.encode("It is 42.", add_special_tokens=False), IM_END]
    assert body["object"] == "chat.completion" and body["model"] == "m"
    assert body["prompt_token_ids"] == record.input_ids
    [choice] = body["choices"]
    assert choice["token_ids"] == record.output_ids
    assert choice["message"]["content"] == "It is 42." and choice["message"]["tool_calls"] == []
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] is None and choice["logprobs"] is None
    assert body["usage"]["prompt_tokens"] == len(record.input_ids)
    assert body["usage"]["completion_tokens"] == len(record.output_ids)
    assert record.response == body and record.status == 200 and record.conversation == 0


def test_sglang_non_streaming_shape_and_token_ids(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="It is 42.")]), openai_flavor="sglang")
    body = post(engine, return_token_ids=True).json()
    [record] = engine.chat_records()
    assert "prompt_token_ids" not in body
    [choice] = body["choices"]
    assert choice["prompt_token_ids"] == record.input_ids == rendered(qwen3, MESSAGES)
    assert choice["response_token_ids"] == record.output_ids
    assert "token_ids" not in choice
    assert choice["matched_stop"] == IM_END and choice["finish_reason"] == "stop"
    assert choice["message"] == {
        "role": "assistant",
        "content": "It is 42.",
        "reasoning_content": None,
        "tool_calls": None,
    }


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_no_token_ids_unless_asked(start_engine, flavor: str) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="Hi.")]), Script([Reply(text="Hi.")]), openai_flavor=flavor)
    body = post(engine).json()
    assert "prompt_token_ids" not in body
    assert not {"token_ids", "prompt_token_ids", "response_token_ids"} & set(body["choices"][0])
    chunks = [e for e in events(post(engine, stream=True)) if e != "[DONE]"]
    assert all("prompt_token_ids" not in c and all("token_ids" not in ch for ch in c["choices"]) for c in chunks)


def test_vllm_streaming_token_ids_and_usage(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    reply = "Zwölf 𝔘 ok."  # multi-byte characters: text deltas must never split them
    engine = start_engine(Script([Reply(text=reply)]), openai_flavor="vllm")
    stream = events(post(engine, stream=True, return_token_ids=True, stream_options={"include_usage": True}))
    [record] = engine.chat_records()
    assert stream[-1] == "[DONE]"
    first, *token_chunks, usage = stream[:-1]
    assert first["prompt_token_ids"] == record.input_ids
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("prompt_token_ids" not in c for c in token_chunks)
    assert [i for c in token_chunks for i in c["choices"][0]["token_ids"]] == record.output_ids
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in token_chunks) == reply
    assert [c["choices"][0]["finish_reason"] for c in token_chunks][-1] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in token_chunks[:-1])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(record.output_ids)
    assert record.response == stream


def test_sglang_rejects_streamed_token_ids(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="Hi.")]), openai_flavor="sglang")
    response = post(engine, stream=True, return_token_ids=True)
    assert response.status_code == 400
    assert response.json() == {
        "object": "error",
        "message": SGLANG_STREAM_TOKEN_IDS_MESSAGE,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert post(engine, stream=True, return_prompt_token_ids=True).status_code == 400
    # The script was not consumed: a plain streaming request still gets the reply.
    chunks = [e for e in events(post(engine, stream=True)) if e != "[DONE]"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "Hi."
    assert chunks[-1]["choices"][0]["matched_stop"] == IM_END
    assert [r.status for r in engine.chat_records()] == [400, 400, 200]


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls(start_engine, qwen3, flavor: str, stream: bool) -> None:  # type: ignore[no-untyped-def]
    text = "Let me compute.\n" + hermes_call("calculator", expression="6 * 7")
    engine = start_engine(Script([Reply(text=text)]), openai_flavor=flavor)
    response = post(engine, tools=CALCULATOR_TOOLS, stream=stream)
    [record] = engine.chat_records()
    assert record.input_ids == rendered(qwen3, MESSAGES, CALCULATOR_TOOLS)
    if stream:
        chunks = [e for e in events(response) if e != "[DONE]"]
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        last = chunks[-1]["choices"][0]
        calls, finish = last["delta"]["tool_calls"], last["finish_reason"]
        assert [call.pop("index") for call in calls] == [0]
    else:
        choice = response.json()["choices"][0]
        content, calls, finish = choice["message"]["content"], choice["message"]["tool_calls"], choice["finish_reason"]
    assert content == "Let me compute.\n"  # text before the first <tool_call>, as vLLM's hermes parser gives it
    assert finish == "tool_calls"
    [call] = calls
    assert call["type"] == "function" and call["id"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "6 * 7"}'}


def test_malformed_tool_call_stays_content(start_engine) -> None:  # type: ignore[no-untyped-def]
    text = '<tool_call>\n{"name": "calculator", "arguments": {oops}}\n</tool_call>'
    engine = start_engine(Script([Reply(text=text)]), Script([Reply(text=hermes_call("calculator", expression="1"))]))
    choice = post(engine, tools=CALCULATOR_TOOLS).json()["choices"][0]
    assert choice["message"]["content"] == text and choice["message"]["tool_calls"] == []
    assert choice["finish_reason"] == "stop"
    # tool_choice "none": calls are not parsed.
    choice = post(engine, tools=CALCULATOR_TOOLS, tool_choice="none").json()["choices"][0]
    assert choice["message"]["tool_calls"] == [] and choice["finish_reason"] == "stop"


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_logprobs_in_the_openai_shape(start_engine, qwen3, flavor: str) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="42")]), Script([Reply(text="42")]), openai_flavor=flavor)
    body = post(engine, logprobs=True, top_logprobs=3).json()
    [record] = engine.chat_records()
    content = body["choices"][0]["logprobs"]["content"]
    base = len(record.input_ids)
    assert [e["logprob"] for e in content] == [token_logprob(t, base + i) for i, t in enumerate(record.output_ids)]
    assert [e["logprob"] for e in content] == record.output_logprobs
    assert [e["token"] for e in content] == [qwen3.decode([t]) for t in record.output_ids]
    assert all(len(e["top_logprobs"]) == 3 and bytes(e["bytes"]).decode() == e["token"] for e in content)
    stream = [e for e in events(post(engine, logprobs=True, stream=True)) if e != "[DONE]"]
    streamed = [x["logprob"] for c in stream for x in (c["choices"][0]["logprobs"] or {}).get("content", [])]
    assert streamed == engine.chat_records()[-1].output_logprobs


def test_max_tokens_and_stop(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="one two three four")]), Script([Reply(text="one two. three")]))
    body = post(engine, max_completion_tokens=2, return_token_ids=True).json()
    assert body["choices"][0]["finish_reason"] == "length" and len(body["choices"][0]["token_ids"]) == 2
    body = post(engine, stop=["."], return_token_ids=True).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "."
    assert choice["message"]["content"] == "one two"
    assert qwen3.decode(choice["token_ids"]) == "one two."


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_reasoning_parser(start_engine, flavor: str) -> None:  # type: ignore[no-untyped-def]
    text = "<think>\nSix sevens.\n</think>\n\nIt is 42."
    engine = start_engine(
        Script([Reply(text=text)]), Script([Reply(text=text)]), openai_flavor=flavor, reasoning_parser="qwen3"
    )
    key = "reasoning" if flavor == "vllm" else "reasoning_content"
    message = post(engine).json()["choices"][0]["message"]
    assert message[key] == "Six sevens." and message["content"] == "It is 42."
    chunks = [e for e in events(post(engine, stream=True)) if e != "[DONE]"]
    assert "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks) == "Six sevens."
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "It is 42."


def test_rerendered_prompts_stay_in_their_conversation(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    # "<tool_call>" spelled in pieces: the server parses the call, the re-render spells the tag as one token.
    pieces = [27, 14172, 13429, 29]
    body = qwen3.encode(hermes_call("calculator", expression="6 * 7")[len("<tool_call>") :], add_special_tokens=False)
    engine = start_engine(
        Script(match="alpha", turns=[Reply(ids=[*pieces, *body, IM_END]), Reply(text="A done")]),
        Script(match="beta", turns=[Reply(ids=[*pieces, *body, IM_END]), Reply(text="B done")]),
    )

    def conversation(user: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": user}]

    answers = {
        user: post(engine, messages=conversation(user), tools=CALCULATOR_TOOLS).json() for user in ("alpha", "beta")
    }
    for user, answer in answers.items():
        message = answer["choices"][0]["message"]
        follow_up = [
            *conversation(user),
            {"role": "assistant", "content": message["content"], "tool_calls": message["tool_calls"]},
            {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "42"},
        ]
        reply = post(engine, messages=follow_up, tools=CALCULATOR_TOOLS).json()
        assert reply["choices"][0]["message"]["content"] == ("A done" if user == "alpha" else "B done")
    records = engine.chat_records()
    assert [r.conversation for r in records] == [0, 1, 0, 1] and not any(r.unscripted for r in records)
    first, second = records[0], records[2]
    expected = first.input_ids + first.output_ids
    assert second.input_ids[: len(first.input_ids)] == first.input_ids
    assert second.input_ids[: len(expected)] != expected  # the re-render drifted...
    # ...and the same first prompt again is a new conversation (a new rollout of the same task).
    post(engine, messages=conversation("alpha"), tools=CALCULATOR_TOOLS)
    assert engine.chat_records()[-1].conversation == 2


def test_errors(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Fault.http(503, retry_after=1), Reply(text="ok")]), context_length=64)
    response = post(engine)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == 503
    assert post(engine, n=2).status_code == 400
    assert post(engine, messages=[]).status_code == 400
    assert post(engine, messages=[{"role": "user", "content": [{"type": "image_url"}]}]).status_code == 400
    too_long = post(engine, messages=[{"role": "user", "content": "word " * 100}])
    assert too_long.status_code == 400 and "maximum context length" in too_long.json()["error"]["message"]
    too_many = post(engine, max_tokens=60)
    assert too_many.status_code == 400 and "too large" in too_many.json()["error"]["message"]
    assert post(engine).json()["choices"][0]["message"]["content"] == "ok"
    assert engine.chat_records()[0].fault == "http:503"


def test_parse_and_cli_options() -> None:
    request = parse_chat_request(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
                },
            ],
            "max_tokens": 5,
            "max_completion_tokens": 7,
        },
        "vllm",
    )
    assert request.messages[0]["content"] == "a\nb"
    assert request.messages[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert request.max_tokens == 7
    args = build_parser().parse_args(["--openai-flavor", "sglang", "--reasoning-parser", "qwen3"])
    assert args.openai_flavor == "sglang" and args.reasoning_parser == "qwen3"
    with pytest.raises(ValueError, match="openai_flavor"):
        LocalEngine(_tiny(), openai_flavor="tgi")  # type: ignore[arg-type]


def _tiny() -> Any:
    from strands_tito.testing.tokenizers import load_tiny_tokenizer

    return load_tiny_tokenizer()
