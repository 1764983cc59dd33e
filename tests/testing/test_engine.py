"""The local SGLang-protocol engine, over real HTTP on 127.0.0.1 (no mocks).

Expected shapes follow the SGLang 0.5.23 wire protocol (its ``http_server.py`` and ``io_struct.py``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from transformers import PreTrainedTokenizerBase

from strands_tito.testing.engine import (
    EngineRecord,
    Fault,
    LocalEngine,
    Reply,
    Script,
    ScriptFile,
    routed_experts_for,
    token_logprob,
)
from strands_tito.testing.engine.protocol import SAMPLING_PARAM_KEYS
from strands_tito.testing.engine.script import step_from_dict
from strands_tito.testing.tokenizers import load_tiny_tokenizer

QWEN_EOS = 151645
META_KEYS = [
    "id",
    "finish_reason",
    "prompt_tokens",
    "weight_version",
    "num_retractions",
    "input_token_logprobs",
    "output_token_logprobs",
    "output_token_logprobs_length",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "weight_versions",
    "cached_tokens_details",
    "dp_rank",
    "e2e_latency",
    "response_sent_to_client_ts",
]
META_KEYS_NO_LOGPROB = [k for k in META_KEYS if "logprob" not in k]


@pytest.fixture(scope="module")
def tiny() -> PreTrainedTokenizerBase:
    return load_tiny_tokenizer()


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[LocalEngine, httpx.Client]]]:
    """Start engines (random port) with an httpx client each; everything is closed at the end of the test."""
    started: list[tuple[LocalEngine, httpx.Client]] = []

    def start(tokenizer: PreTrainedTokenizerBase, *scripts: Script, **kwargs: Any) -> tuple[LocalEngine, httpx.Client]:
        engine = LocalEngine(tokenizer, scripts=list(scripts), **kwargs).start()
        client = httpx.Client(base_url=engine.base_url, timeout=10)
        started.append((engine, client))
        return engine, client

    yield start
    for engine, client in started:
        client.close()
        engine.stop()


def chat(tokenizer: PreTrainedTokenizerBase, user: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def gen(client: httpx.Client, input_ids: list[int], **fields: Any) -> httpx.Response:
    return client.post("/generate", json={"input_ids": input_ids, **fields})


# ----------------------------------------------------------------------------------------------------------------------
# response shape
# ----------------------------------------------------------------------------------------------------------------------


def test_generate_response_shape_field_by_field(qwen3: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(qwen3, Script([Reply(text="Hi!")]))
    prompt = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
    response = client.post(
        "/generate",
        json={
            "input_ids": prompt,
            "sampling_params": {"max_new_tokens": 512, "temperature": 1.0, "skip_special_tokens": False},
            "return_logprob": True,
            "logprob_start_len": 0,
            "return_routed_experts": False,
            "routed_experts_start_len": 0,
            "image_data": None,
            "stream": False,
            "rid": "req-1",
            "some_unknown_top_level_key": 1,
        },
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert b", " not in response.content and b'": ' not in response.content  # compact, like orjson
    body = response.json()
    assert list(body) == ["text", "output_ids", "meta_info"]
    expected_ids = [*qwen3.encode("Hi!", add_special_tokens=False), QWEN_EOS]
    assert body["output_ids"] == expected_ids
    assert body["text"] == "Hi!"  # the matched stop token is trimmed even with skip_special_tokens false
    meta = body["meta_info"]
    assert list(meta) == META_KEYS
    assert meta["id"] == "req-1"
    assert meta["finish_reason"] == {"type": "stop", "matched": QWEN_EOS}
    assert meta["prompt_tokens"] == len(prompt)
    assert meta["completion_tokens"] == len(expected_ids)
    assert meta["weight_version"] == "default"
    assert meta["num_retractions"] == 0
    assert meta["reasoning_tokens"] == 0
    assert meta["cached_tokens"] == 0
    assert meta["cached_tokens_details"] is None
    assert meta["dp_rank"] == 0
    assert isinstance(meta["e2e_latency"], float) and 0 <= meta["e2e_latency"] < 5
    assert abs(meta["response_sent_to_client_ts"] - time.time()) < 5
    assert meta["output_token_logprobs_length"] == len(expected_ids)
    base = len(prompt)
    assert meta["output_token_logprobs"] == [[token_logprob(t, base + i), t, None] for i, t in enumerate(expected_ids)]
    assert meta["input_token_logprobs"][0] == [None, prompt[0], None]
    assert all(lp < 0 and math.isfinite(lp) for lp, _, _ in meta["input_token_logprobs"][1:])

    record = engine.generate_records()[-1]
    assert record.rid == "req-1" and record.status == 200
    assert record.input_ids == prompt
    assert record.output_ids == expected_ids
    assert record.output_logprobs == [entry[0] for entry in meta["output_token_logprobs"]]
    assert record.response == body
    assert record.conversation == 0 and record.script == 0 and not record.unscripted


def test_no_logprob_keys_without_return_logprob(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    body = gen(client, [5, 6, 7], logprob_start_len=2).json()
    meta = body["meta_info"]
    assert list(meta) == META_KEYS_NO_LOGPROB
    assert len(meta["id"]) == 32 and int(meta["id"], 16) >= 0  # uuid4().hex
    assert body["text"] == "OK."  # the default reply


def test_return_prompt_token_ids_and_text_input(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(tiny)
    body = client.post("/generate", json={"text": "def f(x):", "return_prompt_token_ids": True}).json()
    expected = tiny.encode("def f(x):")
    assert body["prompt_token_ids"] == expected
    assert body["meta_info"]["prompt_tokens"] == len(expected)
    assert engine.generate_records()[-1].input_ids == expected


# ----------------------------------------------------------------------------------------------------------------------
# logprobs
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [-1, None, 0, 3, 7, 8])
def test_logprob_start_len_semantics(tiny: PreTrainedTokenizerBase, serve: Any, start: int | None) -> None:
    _, client = serve(tiny)
    prompt = [11, 12, 13, 14, 15, 16, 17, 18]
    meta = gen(client, prompt, return_logprob=True, logprob_start_len=start).json()["meta_info"]
    entries = meta["input_token_logprobs"]
    if start is None or start < 0:
        assert entries == []
        return
    assert len(entries) == len(prompt) - start
    if entries:
        assert entries[0] == [None, prompt[start], None]  # the first entry is always null, even for k > 0
    for j, (logprob, token, text) in enumerate(entries[1:], start=1):
        assert token == prompt[start + j]
        assert logprob == token_logprob(token, start + j)
        assert text is None


def test_logprob_start_len_beyond_prompt(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(tiny)
    response = gen(client, [1, 2, 3], return_logprob=True, logprob_start_len=4)
    assert response.status_code == 400
    assert response.json() == {
        "error": {
            "message": "req.logprob_start_len=4 is higher than the number of input tokens "
            "len(req.origin_input_ids)=3. Please use a smaller logprob_start_len."
        }
    }
    # Ignored when return_logprob is false.
    assert gen(client, [1, 2, 3], logprob_start_len=40).status_code == 200
    assert engine.generate_records()[0].conversation is None  # rejected before scheduling


def test_top_logprobs_token_ids_and_text(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, Script([Reply(ids=[300, 301, 4098])]))
    prompt = [40, 41, 42, 43]
    meta = gen(
        client,
        prompt,
        return_logprob=True,
        logprob_start_len=1,
        top_logprobs_num=3,
        token_ids_logprob=[7, 9],
        return_text_in_logprobs=True,
    ).json()["meta_info"]
    assert meta["output_token_logprobs"][0] == [token_logprob(300, 4), 300, tiny.decode([300])]
    assert meta["input_token_logprobs"][1][2] == tiny.decode([prompt[2]])
    assert meta["input_top_logprobs"][0] is None and len(meta["input_top_logprobs"]) == 3
    assert len(meta["output_top_logprobs"]) == 3
    for row in meta["output_top_logprobs"]:
        assert len(row) == 3
        logprobs = [entry[0] for entry in row]
        assert logprobs == sorted(logprobs, reverse=True)
        assert all(isinstance(entry[2], str) for entry in row)
    assert meta["input_token_ids_logprobs"][0] is None
    assert [[e[1] for e in row] for row in meta["output_token_ids_logprobs"]] == [[7, 9]] * 3
    assert meta["output_token_ids_logprobs"][1][0][0] == token_logprob(7, 5)


def test_token_logprob_is_deterministic_negative_finite() -> None:
    values = [token_logprob(t, p) for t in range(0, 160000, 997) for p in range(0, 5000, 331)]
    assert all(v < 0 and math.isfinite(v) for v in values)
    assert token_logprob(151645, 12) == token_logprob(151645, 12)
    assert len(set(values)) > 100


# ----------------------------------------------------------------------------------------------------------------------
# cached tokens
# ----------------------------------------------------------------------------------------------------------------------


def test_cached_tokens_follow_prefix_reuse_and_logprob_cap(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    first = list(range(100, 120))
    body = gen(client, first).json()
    assert body["meta_info"]["cached_tokens"] == 0
    history = first + body["output_ids"]
    second = [*history, 7, 8, 9]
    # The last sampled token has no KV, so it is not cached (schedule_batch.py kv_committed_len).
    assert gen(client, second).json()["meta_info"]["cached_tokens"] == len(history) - 1
    # Prefix reuse is capped at logprob_start_len when logprobs are requested...
    meta = gen(client, [*second, 1], return_logprob=True, logprob_start_len=5).json()["meta_info"]
    assert meta["cached_tokens"] == 5
    meta = gen(client, [*second, 2], return_logprob=True, logprob_start_len=0).json()["meta_info"]
    assert meta["cached_tokens"] == 0
    # ... and always leaves at least one prompt token to prefill.
    assert gen(client, first).json()["meta_info"]["cached_tokens"] == len(first) - 1
    assert client.post("/flush_cache").status_code == 200
    assert gen(client, first).json()["meta_info"]["cached_tokens"] == 0


# ----------------------------------------------------------------------------------------------------------------------
# finish reasons and text trimming
# ----------------------------------------------------------------------------------------------------------------------


def test_max_new_tokens_cuts_reply(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, Script([Reply(ids=[300, 301, 302, 303, 4098])]), default=Reply(ids=[300, 4098]))
    body = gen(client, [1, 2], sampling_params={"max_new_tokens": 3}).json()
    assert body["output_ids"] == [300, 301, 302]
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert body["text"] == tiny.decode([300, 301, 302])
    # The stop check comes before the length check (schedule_batch.py:2007-2045): an eos landing exactly on the cap
    # is a stop, and trimmed from the text.
    body = gen(client, [9, 9], sampling_params={"max_new_tokens": 2}).json()
    assert body["output_ids"] == [300, 4098]
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 4098}
    assert body["text"] == tiny.decode([300])


def test_default_max_new_tokens_is_128(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, Script([Reply(ids=[300] * 200)]))
    body = gen(client, [1]).json()
    assert len(body["output_ids"]) == 128
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 128}


def test_stop_token_ids_and_no_stop_trim(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    reply = Reply(ids=[300, 301, 302, 303, 4098])
    _, client = serve(tiny, Script([reply]), Script([reply]))
    body = gen(client, [1], sampling_params={"stop_token_ids": [302]}).json()
    assert body["output_ids"] == [300, 301, 302]  # output_ids run through the stop token
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 302}
    assert body["text"] == tiny.decode([300, 301])
    body = gen(client, [2], sampling_params={"stop_token_ids": [302], "no_stop_trim": True}).json()
    assert body["text"] == tiny.decode([300, 301, 302])


def test_eos_ignore_eos_and_skip_special_tokens(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    scripted = Reply(ids=[300, 4098, 301])
    _, client = serve(tiny, Script([scripted]), Script([scripted]), Script([Reply(ids=[4097, 300, 4098])]))
    body = gen(client, [1]).json()
    assert body["output_ids"] == [300, 4098]
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 4098}
    body = gen(client, [2], sampling_params={"ignore_eos": True}).json()
    assert body["output_ids"] == [300, 4098, 301]
    assert body["meta_info"]["finish_reason"]["type"] == "length"  # a script running out looks like the cap
    assert body["text"] == tiny.decode([300, 301])  # skip_special_tokens defaults to true
    body = gen(client, [3], sampling_params={"skip_special_tokens": False}).json()
    assert body["text"] == "<|im_start|>" + tiny.decode([300])


def test_stop_strings(qwen3: PreTrainedTokenizerBase, serve: Any) -> None:
    reply = Reply(text="The answer is 42. Done. More text")
    _, client = serve(qwen3, Script([reply]), Script([reply]))
    body = gen(client, [1, 2, 3], sampling_params={"stop": ["Done"]}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "Done"}
    assert body["text"] == "The answer is 42. "
    assert qwen3.decode(body["output_ids"]).endswith("Done")  # output_ids run through the completing token
    body = gen(client, [4, 5], sampling_params={"stop": "Done", "no_stop_trim": True}).json()
    assert body["text"].endswith("Done")


def test_reply_finish_override(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, Script([Reply(ids=[300, 301], finish={"type": "stop", "matched": 301})]))
    body = gen(client, [1]).json()
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": 301}
    assert body["text"] == tiny.decode([300])


def test_non_canonical_ids_are_sent_exactly(qwen3: PreTrainedTokenizerBase, serve: Any) -> None:
    """Token sequences a re-encoding would change: the engine emits what the script says, not a re-encoding."""
    tool_call_pieces = [27, 14172, 13429, 29]  # "<tool_call>" spelled in plain pieces
    engine, client = serve(qwen3, Script([Reply(ids=[32713, 385, 198, 198, *tool_call_pieces, QWEN_EOS])]))
    body = gen(client, chat(qwen3, "hi")).json()
    assert body["output_ids"] == [32713, 385, 198, 198, *tool_call_pieces, QWEN_EOS]
    assert body["text"] == "Hello\n\n<tool_call>"
    assert qwen3.encode(body["text"], add_special_tokens=False) == [9707, 271, 151657]
    assert engine.generate_records()[-1].output_ids == body["output_ids"]


# ----------------------------------------------------------------------------------------------------------------------
# faults
# ----------------------------------------------------------------------------------------------------------------------


def test_http_faults_count_and_retry_after(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    script = Script([Fault.http(503, count=2, retry_after=1.5), Fault.http(429), Reply(text="done")])
    engine, client = serve(tiny, script)
    prompt = [1, 2, 3]
    for _ in range(2):
        response = gen(client, prompt)
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1.5"
        assert response.json() == {
            "object": "error",
            "message": "The request queue is full.",
            "type": "503",
            "param": None,
            "code": 503,
        }
    response = gen(client, prompt)
    assert response.status_code == 429 and "retry-after" not in response.headers
    assert response.json()["code"] == 429 and response.json()["object"] == "error"
    assert gen(client, prompt).json()["text"] == "done"
    records = engine.generate_records()
    assert [r.fault for r in records] == ["http:503", "http:503", "http:429", None]
    assert {r.conversation for r in records} == {0}  # a fault does not advance the conversation's history


@pytest.mark.parametrize("status", [408, 500, 502, 504])
def test_other_http_fault_statuses(tiny: PreTrainedTokenizerBase, serve: Any, status: int) -> None:
    _, client = serve(tiny, Script([Fault.http(status)]))
    response = gen(client, [1])
    assert response.status_code == status
    body = response.json()
    assert body["code"] == status and body["type"] == str(status) and body["message"]


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("input", "The input (5 tokens) is longer than the model's context length (4096 tokens)."),
        (
            "total",
            "Requested token count exceeds the model's maximum context length of 4096 tokens. You requested a total "
            "of 105 tokens: 5 tokens from the input messages and 100 tokens for the completion. Please reduce the "
            "number of tokens in the input messages or the completion to fit within the limit.",
        ),
        (
            "scheduler",
            "Input length (5 tokens) exceeds the maximum allowed length (4090 tokens). "
            "Use a shorter input or enable --allow-auto-truncate.",
        ),
    ],
)
def test_context_overflow_fault(tiny: PreTrainedTokenizerBase, serve: Any, variant: Any, message: str) -> None:
    engine, client = serve(tiny, Script([Fault.context_overflow(variant), Reply(text="x")]), context_length=4096)
    response = gen(client, [1, 2, 3, 4, 5], sampling_params={"max_new_tokens": 100})
    assert response.status_code == 400
    assert response.json() == {"error": {"message": message}}
    assert engine.generate_records()[-1].fault == f"context_overflow:{variant}"


def test_abort_faults(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    script = Script([Fault.abort(ids=[300, 301]), Fault.abort(400, message="bad"), Fault.abort(503, message="busy")])
    engine, client = serve(tiny, script)
    body = gen(client, [1, 2], return_logprob=True).json()
    assert body["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert list(body["meta_info"]) == META_KEYS  # full meta_info on a running-request abort
    assert body["output_ids"] == [300, 301] and body["meta_info"]["completion_tokens"] == 2
    response = gen(client, [1, 2])
    assert response.status_code == 400 and response.json() == {"error": {"message": "bad"}}
    response = gen(client, [1, 2])
    assert response.status_code == 503
    assert response.json() == {"object": "error", "message": "busy", "type": "503", "param": None, "code": 503}
    assert [r.fault for r in engine.generate_records()] == ["abort", "abort:400", "abort:503"]


def test_malformed_faults(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    kinds = [
        "missing_output_ids",
        "logprobs_wrong_length",
        "nan_logprob",
        "non_json",
        "missing_meta_info",
        "wrong_types",
        "truncated_body",
    ]
    engine, client = serve(tiny, Script([Fault.malformed(kind, text="abc") for kind in kinds]))
    fields = {"return_logprob": True}
    prompt = [1, 2, 3]

    assert "output_ids" not in gen(client, prompt, **fields).json()
    body = gen(client, prompt, **fields).json()
    assert len(body["meta_info"]["output_token_logprobs"]) == len(body["output_ids"]) - 1
    response = gen(client, prompt, **fields)
    assert b"[null," in response.content  # SGLang's orjson writes a NaN logprob as null
    assert response.json()["meta_info"]["output_token_logprobs"][0][0] is None
    response = gen(client, prompt, **fields)
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.content)
    assert "meta_info" not in gen(client, prompt, **fields).json()
    body = gen(client, prompt, **fields).json()
    assert isinstance(body["output_ids"], str) and isinstance(body["meta_info"]["completion_tokens"], str)
    with pytest.raises(httpx.RemoteProtocolError):
        gen(client, prompt, **fields)

    records = engine.generate_records()
    assert [r.fault for r in records] == [f"malformed:{kind}" for kind in kinds]
    expected = [*tiny.encode("abc", add_special_tokens=False), 4098]
    assert all(r.output_ids == expected for r in records)
    assert {r.conversation for r in records} == {0}
    # The engine is still healthy after the truncated body closed the connection.
    assert client.get("/health").status_code == 200


# ----------------------------------------------------------------------------------------------------------------------
# request validation and error body shapes
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"input_ids": "abc"},
        {"input_ids": [1, 2], "routed_experts_start_len": None},
        {"input_ids": [1, "x"]},
        {"input_ids": [1], "stream": "yes"},
        {"input_ids": [1], "sampling_params": "greedy"},
        [1, 2, 3],
    ],
)
def test_fastapi_type_errors(tiny: PreTrainedTokenizerBase, serve: Any, payload: Any) -> None:
    _, client = serve(tiny)
    response = client.post("/generate", json=payload)
    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["object", "message", "type", "param", "code"]
    assert body["object"] == "error" and body["type"] == "Bad Request"
    assert body["param"] is None and body["code"] == 400
    assert "validation error" in body["message"]


def test_invalid_json_and_empty_body(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    for content in (b"{not json", b""):
        response = client.post("/generate", content=content, headers={"content-type": "application/json"})
        assert response.status_code == 400
        assert response.json()["object"] == "error"


def test_contract_errors_are_plain_strings(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    response = gen(client, [1], sampling_params={"max_new_tokens": 4, "foo": 1})
    assert response.status_code == 400
    expected = ", ".join(f"`{key}`" for key in SAMPLING_PARAM_KEYS)
    assert response.json() == {"error": f"unknown field `foo`, expected one of {expected}"}
    assert expected.startswith("`max_new_tokens`, `stop`, `stop_token_ids`")
    response = gen(client, [1], sampling_params={"json_schema": {"type": "object"}})
    assert response.status_code == 400
    assert response.json() == {"error": "invalid type: map, expected a string"}
    response = gen(client, [1], sampling_params={"max_new_tokens": "8"})
    assert response.json() == {"error": 'invalid type: string "8", expected i64'}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "Either text, input_ids or input_embeds should be provided."),
        ({"input_ids": []}, "input_ids cannot be empty."),
        ({"input_ids": [[1, 2], [3]]}, "batch not supported by strands-tito engine"),
        ({"text": ["a", "b"]}, "batch not supported by strands-tito engine"),
        ({"input_ids": [1], "sampling_params": {"n": 2}}, "batch not supported by strands-tito engine"),
        ({"input_ids": [1], "sampling_params": {"top_p": 1.5}}, "top_p must be in (0, 1], got 1.5."),
        ({"input_ids": [1], "sampling_params": {"temperature": -1}}, "temperature must be non-negative, got -1.0."),
        ({"input_ids": [1], "sampling_params": {"top_k": 0}}, "top_k must be -1 (disable) or at least 1, got 0."),
        (
            {"input_ids": [1], "sampling_params": {"json_schema": "{}", "regex": "a+"}},
            "Only one of json_schema, regex, ebnf, or structural_tag can be set.",
        ),
        ({"input_ids": [1, 99999]}, "The input_ids [1, 99999] contains values greater than the vocab size (4105)."),
    ],
)
def test_value_errors(tiny: PreTrainedTokenizerBase, serve: Any, payload: dict[str, Any], message: str) -> None:
    engine, client = serve(tiny, Script([Reply(text="scripted")]))
    response = client.post("/generate", json=payload)
    assert response.status_code == 400
    assert response.json() == {"error": {"message": message}}
    # A rejected request consumes no scripted step.
    assert gen(client, [7]).json()["text"] == "scripted"
    assert engine.generate_records()[0].conversation is None


def test_context_length_validation(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, context_length=64)
    response = gen(client, [1] * 64)
    assert response.json() == {
        "error": {"message": "The input (64 tokens) is longer than the model's context length (64 tokens)."}
    }
    # tokenizer_manager.py:1357: the total may equal the context (">", not ">=").
    assert gen(client, [1] * 40, sampling_params={"max_new_tokens": 24}).status_code == 200
    response = gen(client, [1] * 40, sampling_params={"max_new_tokens": 25})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(
        "Requested token count exceeds the model's maximum context length of 64 tokens. "
        "You requested a total of 65 tokens: 40 tokens from the input messages and 25 tokens for the completion."
    )
    # Without an explicit max_new_tokens only the scheduler's max_req_input_len (context - 6) applies ...
    response = gen(client, [1] * 58)
    assert response.json()["error"]["message"] == (
        "Input length (58 tokens) exceeds the maximum allowed length (58 tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )
    # ... and max_new_tokens is clipped to the room left (max_req_len - prompt - 1).
    _, client2 = serve(tiny, Script([Reply(ids=[300] * 50)]), context_length=64)
    body = gen(client2, [1] * 50).json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 12}
    assert len(body["output_ids"]) == 12


def test_value_error_in_stream_mode_is_an_sse_event(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    response = gen(client, [], stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text == (
        'data: {"error":{"message":"input_ids cannot be empty.","type":"invalid_request_error",'
        '"code":400,"retryable":false}}\n\ndata: [DONE]\n\n'
    )
    # Type errors are still plain HTTP 400s.
    assert gen(client, "x", stream=True).status_code == 400


# ----------------------------------------------------------------------------------------------------------------------
# routed experts
# ----------------------------------------------------------------------------------------------------------------------


def test_routed_experts_shape_and_decoding(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    layers, top_k, experts = 3, 2, 8
    reply = Reply(ids=[300, 301, 4098])
    engine, client = serve(tiny, Script([reply, reply]), routed_experts=(layers, top_k, experts))
    prompt = [10, 11, 12, 13, 14]
    body = gen(client, prompt, return_routed_experts=True, routed_experts_start_len=0).json()
    meta = body["meta_info"]
    out = body["output_ids"]
    array = np.frombuffer(base64.b64decode(meta["routed_experts"]), dtype=np.int32)
    seqlen = meta["prompt_tokens"] + meta["completion_tokens"]
    array = array.reshape(seqlen - 1, layers, top_k)
    assert np.array_equal(array, routed_experts_for(prompt + out, 0, layers, top_k, experts))
    assert array.min() >= 0 and array.max() < experts
    assert all(len(set(row)) == top_k for row in array.reshape(-1, top_k).tolist())

    # Per-turn slices (start = tokens already recorded - 1) concatenate to total - 1 rows.
    turn2 = [*prompt, *out, 20, 21]
    start = len(prompt) + len(out) - 1
    body2 = gen(client, turn2, return_routed_experts=True, routed_experts_start_len=start).json()
    second = np.frombuffer(base64.b64decode(body2["meta_info"]["routed_experts"]), dtype="<i4")
    second = second.reshape(-1, layers, top_k)
    full = turn2 + body2["output_ids"]
    assert second.shape[0] == len(full) - 1 - start
    combined = np.concatenate([array[:start], second])
    assert np.array_equal(combined, routed_experts_for(full, 0, layers, top_k, experts))

    response = gen(client, prompt, return_routed_experts=True, routed_experts_start_len=len(prompt) + 1)
    assert response.status_code == 400 and "routed_experts_start_len" in response.json()["error"]["message"]
    assert "routed_experts" not in gen(client, [1, 2]).json()["meta_info"]
    assert engine.generate_records()[0].response["meta_info"]["routed_experts"] == meta["routed_experts"]


def test_routed_experts_silently_absent_when_disabled(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny)
    meta = gen(client, [1, 2], return_routed_experts=True, routed_experts_start_len=99).json()["meta_info"]
    assert "routed_experts" not in meta


# ----------------------------------------------------------------------------------------------------------------------
# conversations, scripts and records
# ----------------------------------------------------------------------------------------------------------------------


def test_interleaved_conversations_with_match(qwen3: PreTrainedTokenizerBase, serve: Any) -> None:
    weather = Script([Reply(text="W1"), Reply(text="W2")], match="weather")
    math_ = Script([Reply(text="M1"), Fault.http(503), Reply(text="M2")], match="math")
    engine, client = serve(qwen3, weather, math_, default=Reply(text="fallback"))

    m_prompt = chat(qwen3, "a math question")
    w_prompt = chat(qwen3, "what is the weather")
    m1 = gen(client, m_prompt).json()
    w1 = gen(client, w_prompt).json()
    assert (m1["text"], w1["text"]) == ("M1", "W1")
    follow = qwen3.encode("<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    w_turn2 = [*w_prompt, *w1["output_ids"], *qwen3.encode("\n"), *follow]
    m_turn2 = [*m_prompt, *m1["output_ids"], *qwen3.encode("\n"), *follow]
    assert gen(client, m_turn2).status_code == 503
    w2 = gen(client, w_turn2).json()
    assert w2["text"] == "W2"
    assert gen(client, m_turn2).json()["text"] == "M2"  # the retry of the faulted request stays in its conversation
    # Exhausted script -> default, marked unscripted; a new conversation with no free script too.
    assert gen(client, [*w_turn2, *w2["output_ids"], 1, 2]).json()["text"] == "fallback"
    assert gen(client, chat(qwen3, "unrelated")).json()["text"] == "fallback"

    records = engine.generate_records()
    assert [r.conversation for r in records] == [0, 1, 0, 1, 0, 1, 2]
    assert [r.script for r in records] == [1, 0, 1, 0, 1, 0, None]
    assert [r.unscripted for r in records] == [False] * 5 + [True, True]

    # Scripts added while running go to new conversations.
    engine.add_script(Script([Reply(text="late")]))
    assert gen(client, chat(qwen3, "newcomer")).json()["text"] == "late"


def test_first_unused_script_without_match_and_no_default(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(tiny, Script([Reply(text="a")]), Script([Reply(text="b")]), default=None)
    assert gen(client, [1, 2]).json()["text"] == "a"
    assert gen(client, [3, 4]).json()["text"] == "b"
    response = gen(client, [5, 6])
    assert response.status_code == 400
    assert response.json() == {"error": {"message": "strands-tito engine: no scripted reply for this request"}}
    assert engine.generate_records()[-1].unscripted


def test_records_snapshot_and_jsonl(tiny: PreTrainedTokenizerBase, serve: Any, tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    engine, client = serve(tiny, record_path=path)
    gen(client, [1, 2, 3], rid="r1")
    client.get("/health")
    client.post("/abort_request", json={"rid": "nothing", "abort_all": False})
    records = engine.records
    assert [(r.path, r.status) for r in records] == [("/generate", 200), ("/health", 200), ("/abort_request", 200)]
    assert records[2].rid == "nothing" and records[2].request == {"rid": "nothing", "abort_all": False}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["path"] for line in lines] == ["/generate", "/health", "/abort_request"]
    assert lines[0]["input_ids"] == [1, 2, 3] and lines[0]["rid"] == "r1"
    assert EngineRecord(**lines[0]).output_ids == records[0].output_ids


# ----------------------------------------------------------------------------------------------------------------------
# streaming
# ----------------------------------------------------------------------------------------------------------------------


def test_sse_stream_is_cumulative(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    reply = Reply(ids=[300, 301, 302, 4098])
    engine, client = serve(tiny, Script([reply]), Script([reply]))
    events: list[Any] = []
    with client.stream("POST", "/generate", json={"input_ids": [1, 2], "stream": True, "return_logprob": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        for line in r.iter_lines():
            if line.startswith("data: "):
                payload = line[len("data: ") :]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 4
    for size, chunk in enumerate(chunks[:-1], start=1):
        assert chunk["output_ids"] == [300, 301, 302, 4098][:size]
        assert chunk["meta_info"]["finish_reason"] is None
        assert chunk["meta_info"]["output_token_logprobs_length"] == size
        assert "e2e_latency" not in chunk["meta_info"]
    final = chunks[-1]
    assert final["meta_info"]["finish_reason"] == {"type": "stop", "matched": 4098}
    plain = gen(client, [1, 2], return_logprob=True).json()
    assert final["output_ids"] == plain["output_ids"] and final["text"] == plain["text"]
    assert list(final["meta_info"]) == list(plain["meta_info"])
    assert engine.generate_records()[0].response == [*chunks, "[DONE]"]


def test_faults_in_stream_mode(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    steps: list[Any] = [Fault.malformed("truncated_body", text="ab"), Fault.context_overflow(), Fault.http(503)]
    _, client = serve(tiny, Script(steps))
    fields = {"stream": True}
    with pytest.raises(httpx.RemoteProtocolError):
        gen(client, [1, 2], **fields)
    response = gen(client, [1, 2], **fields)
    assert response.status_code == 200 and response.text.startswith('data: {"error":{"message":"The input (2')
    assert response.text.endswith("data: [DONE]\n\n")
    assert gen(client, [1, 2], **fields).status_code == 503


# ----------------------------------------------------------------------------------------------------------------------
# slow replies, disconnects, aborts
# ----------------------------------------------------------------------------------------------------------------------


def _wait_for(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_client_disconnect_during_slow_reply(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(tiny, Script([Reply(text="slow", delay=30), Reply(text="fast")]))

    async def impatient() -> None:
        async with httpx.AsyncClient(base_url=engine.base_url) as aclient:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(aclient.post("/generate", json={"input_ids": [1, 2, 3]}), timeout=0.3)

    started = time.monotonic()
    asyncio.run(impatient())
    _wait_for(lambda: len(engine.generate_records()) == 1)
    assert time.monotonic() - started < 5
    record = engine.generate_records()[0]
    assert record.disconnected and record.status == 499 and record.output_ids is None
    # The retry belongs to the same conversation and gets the next step.
    assert gen(client, [1, 2, 3]).json()["text"] == "fast"
    assert engine.generate_records()[1].conversation == record.conversation


def test_abort_request_endpoint_ends_a_slow_reply(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, _ = serve(tiny, Script([Reply(text="slow", delay=30)]))

    async def scenario() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=10) as aclient:
            pending = asyncio.create_task(aclient.post("/generate", json={"input_ids": [1], "rid": "slow-1"}))
            await asyncio.sleep(0.2)
            abort = await aclient.post("/abort_request", json={"rid": "slow-1"})
            assert abort.status_code == 200 and abort.content == b""
            return (await pending).json()  # type: ignore[no-any-return]

    body = asyncio.run(scenario())
    assert body["meta_info"]["finish_reason"] == {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    assert body["output_ids"] == [] and body["meta_info"]["id"] == "slow-1"


def test_pause_and_continue_generation(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, _ = serve(tiny)

    async def scenario() -> str:
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=10) as aclient:
            paused = await aclient.post("/pause_generation", json={"mode": "in_place"})
            assert paused.json() == {"message": "Generation paused successfully.", "status": "ok"}
            pending = asyncio.create_task(aclient.post("/generate", json={"input_ids": [1]}))
            await asyncio.sleep(0.2)
            assert not pending.done()  # requests wait while paused
            await aclient.post("/continue_generation", json={})
            return (await pending).json()["text"]  # type: ignore[no-any-return]

    assert asyncio.run(scenario()) == "OK."


# ----------------------------------------------------------------------------------------------------------------------
# other endpoints and HTTP behaviour
# ----------------------------------------------------------------------------------------------------------------------


def test_other_endpoints(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    _, client = serve(tiny, context_length=8192, model_path="org/model")
    for path in ("/health", "/health_generate", "/ready"):
        response = client.get(path)
        assert response.status_code == 200 and response.content == b""
    for path in ("/model_info", "/get_model_info"):
        info = client.get(path).json()
        assert info["has_image_understanding"] is False and info["model_path"] == "org/model"
        assert info["is_generation"] is True and info["weight_version"] == "default"
    server_info = client.get("/server_info").json()
    assert server_info["context_length"] == 8192 and server_info["max_req_input_len"] == 8186
    assert client.get("/get_server_info").json()["model_path"] == "org/model"
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["max_model_len"] == 8192 and models["data"][0]["id"] == "org/model"
    for method in ("GET", "POST"):
        response = client.request(method, "/flush_cache")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        assert response.text == (
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
            "requests, the operation will not be performed.)\n"
        )
    response = client.get("/nope")
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
    response = client.get("/generate")
    assert response.status_code == 405 and response.json() == {"detail": "Method Not Allowed"}
    assert client.put("/generate", json={"input_ids": [1]}).status_code == 200


def _read_response(sock: socket.socket, buffer: bytearray) -> tuple[bytes, dict[str, str], bytes]:
    """Read one Content-Length response from a raw socket (keeps any bytes of the next one in ``buffer``)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        rest += chunk
    buffer[:] = rest[length:]
    return lines[0].encode(), headers, rest[:length]


def test_raw_http_keep_alive_pipelining_chunked_and_head(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, _ = serve(tiny)
    body = json.dumps({"input_ids": [1, 2]}).encode()
    plain = b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    chunked = (
        b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%b\r\n" % (5, body[:5])
        + b"%x\r\n%b\r\n0\r\n\r\n" % (len(body) - 5, body[5:])
    )
    head = b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((engine.host, engine.port), timeout=5) as sock:
        buffer = bytearray()
        sock.sendall(plain + chunked + head)  # three pipelined requests on one connection
        for _ in range(2):
            status, headers, content = _read_response(sock, buffer)
            assert status == b"HTTP/1.1 200 OK" and "connection" not in headers
            assert json.loads(content)["text"] == "OK."
        status, headers, content = _read_response(sock, buffer)
        assert status == b"HTTP/1.1 200 OK" and content == b""
        # Expect: 100-continue gets an interim response before the body is sent.
        sock.sendall(
            b"POST /generate HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        assert sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        status, headers, content = _read_response(sock, buffer)
        assert status == b"HTTP/1.1 200 OK" and headers["connection"] == "close"
        assert sock.recv(10) == b""  # closed as asked
    assert len(engine.generate_records()) == 3


def test_bad_requests_and_body_limit(tiny: PreTrainedTokenizerBase, serve: Any) -> None:
    engine, client = serve(tiny, max_body=2048)
    assert gen(client, list(range(1000))).status_code == 413
    with socket.create_connection((engine.host, engine.port), timeout=5) as sock:
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400 Bad Request")
    assert gen(client, [1]).status_code == 200  # the server survives both


def test_engine_as_context_manager(tiny: PreTrainedTokenizerBase) -> None:
    with LocalEngine(tiny) as engine:
        assert engine.port != 0 and engine.base_url == f"http://127.0.0.1:{engine.port}"
        assert httpx.get(engine.base_url + "/health").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(engine.base_url + "/health")


# ----------------------------------------------------------------------------------------------------------------------
# script files and the CLI
# ----------------------------------------------------------------------------------------------------------------------


def test_script_file_parsing() -> None:
    data = {
        "scripts": [
            {
                "match": "weather",
                "turns": [
                    "plain text",
                    {"text": "hi", "eos": False, "delay": 0.1},
                    {"ids": [1, 2]},
                    {"fault": "http", "status": 503, "count": 2, "retry_after": 1},
                    {"fault": "context_overflow", "variant": "total"},
                    {"fault": "abort", "text": "partial"},
                    {"fault": "malformed", "kind": "nan_logprob"},
                ],
            }
        ],
        "default": None,
    }
    parsed = ScriptFile.from_dict(data)
    assert parsed.default is None
    script = parsed.scripts[0]
    assert script.match == "weather"
    assert script.turns[0] == Reply(text="plain text")
    assert script.turns[1] == Reply(text="hi", eos=False, delay=0.1)
    assert script.turns[2] == Reply(ids=(1, 2))
    assert script.turns[3] == Fault.http(503, count=2, retry_after=1.0)
    assert len(list(script.expanded())) == len(script.turns) + 1
    assert ScriptFile.from_dict({}).default == Reply(text="OK.")
    for bad in ({"txt": "typo"}, {"fault": "http"}, {"fault": "malformed", "kind": "nope"}, {"fault": "explode"}):
        with pytest.raises(ValueError):
            step_from_dict(bad)
    with pytest.raises(ValueError):
        Reply(text="a", ids=[1])


def test_cli_subprocess(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [{"match": None, "turns": [{"text": "from the cli"}]}]}))
    record = tmp_path / "records.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "strands_tito.testing.engine", "--port", "0", "--tokenizer", "tiny"]
    command += ["--script", str(script), "--record", str(record), "--context-length", "2048"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("strands-tito engine listening on http://127.0.0.1:"), line
        base_url = line.split(" on ", 1)[1].strip()
        with httpx.Client(base_url=base_url, timeout=10) as client:
            assert client.get("/health").status_code == 200
            body = client.post("/generate", json={"input_ids": [1, 2, 3]}).json()
            assert body["text"] == "from the cli"
            assert client.get("/v1/models").json()["data"][0]["max_model_len"] == 2048
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = record.read_text().splitlines()
    assert [json.loads(line)["path"] for line in lines] == ["/health", "/generate", "/v1/models"]
