"""`strands-tito engine|demo --chat-template NAME` serve the family's reference template: its Hugging Face original
where one was found (the manifest's file and sha256), not llama.cpp's copy where that copy is an edit."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from strands_tito.providers.rendering import render_chat_template
from strands_tito.testing.demo import main

from ..helpers.agents import CALCULATOR_TOOLS
from ..helpers.templates import TEMPLATES, llama_cpp_tokenizer, manifest, original_tokenizer, reference_tokenizer
from ..helpers.wheels import serving

COMMAND = str(Path(sys.executable).parent / "strands-tito")
CALL = {"id": "functions.calculator:7", "type": "function", "function": {"name": "calculator", "arguments": {}}}
#: A finished tool call and its result, under the call id the client chose: Kimi-K2-Thinking's original renders that
#: id; llama.cpp's copy numbers the calls itself (functions.calculator:0).
MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "Compute 6 * 7."},
    {"role": "assistant", "content": "", "tool_calls": [{**CALL, "function": {**CALL["function"], "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": CALL["id"], "content": "42"},
]


def prompt_ids(tokenizer: Any) -> list[int]:
    """The prompt ``tokenizer``'s template renders for :data:`MESSAGES` (the call's arguments as a mapping)."""
    structured = [MESSAGES[0], {**MESSAGES[1], "tool_calls": [CALL]}, MESSAGES[2]]
    text = render_chat_template(tokenizer, structured, tools=CALCULATOR_TOOLS, add_generation_prompt=True)
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_the_engine_serves_the_original_where_llama_cpps_copy_is_an_edit(tmp_path: Path) -> None:
    name = "kimi-k2-thinking"
    original = manifest()["families"][name]["original"]
    text = (TEMPLATES / original["file"]).read_text(encoding="utf-8")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == original["sha256"]
    tokenizer, llama_cpp = original_tokenizer(name, original["file"]), llama_cpp_tokenizer(name)
    want, edited = (prompt_ids(t) for t in (tokenizer, llama_cpp))
    assert want != edited

    env = {**os.environ, "STRANDS_TITO_CAPTURE": "0"}
    command = [COMMAND, "engine", "--chat-template", name, "--port", "0"]
    with serving(command, tmp_path, env, r"listening on (http://\S+)") as served:
        body = {
            "model": "m",
            "messages": MESSAGES,
            "tools": CALCULATOR_TOOLS,
            "return_token_ids": True,
            "max_tokens": 1,
        }
        reply = httpx.post(served.ready.group(1) + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["prompt_token_ids"] == want
    assert reference_tokenizer(name).chat_template == text  # what family_tokenizer installs, for tests and the demo


@pytest.mark.parametrize("name", ["deepseek-v3.1", "kimi-k2-thinking"])
def test_the_demo_runs_exactly_on_the_original(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3.1's original concatenates a call's arguments as JSON text (llama.cpp's copy adds ``| tojson``);
    Kimi-K2-Thinking's writes the calls' own ids. The demo's trajectory equals what the engine received and produced."""
    assert main(["--chat-template", name, "--out", str(tmp_path)]) == 0
    assert "equals what the engine received and produced" in capsys.readouterr().out
    [record] = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert record["complete"] is True and len(record["turns"]) == 2
    text = str(reference_tokenizer(name).decode(record["token_ids"], skip_special_tokens=False))
    assert '{"a": 25, "b": 17}' in text
