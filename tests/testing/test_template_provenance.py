"""Each family is tested on its reference template (the Hugging Face original where one was found), pinned by hash.

The provenance is ``tests/data/templates/manifest.json``; ``tests/templates.py`` reads it.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest
from tokenizers import AddedToken

from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import PromptEncoder, PromptError
from strands_tito.testing.chat_templates import real_chat_template
from strands_tito.testing.family_tokenizers import family_tokenizer

from ..templates import (
    TEMPLATES,
    json_text_arguments,
    manifest,
    original_tokenizer,
    other_originals,
    reference_template,
    reference_tokenizer,
)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_every_family_has_a_recorded_reference() -> None:
    entries = manifest()["families"]
    assert sorted(entries) == sorted(FAMILIES)
    for name, entry in entries.items():
        assert entry["llama_cpp_copy"]["file"] == f"{FAMILIES[name].template}.jinja", name
        assert entry["reference"] in ("original", "llama_cpp_copy"), name
        assert entry["arguments"] in ("mapping", "json_text"), name
        if entry["reference"] == "original":
            assert entry["original"]["source"].startswith("https://github.com/"), name
    vendored = {e["original"]["file"] for e in entries.values() if e["reference"] == "original"}
    vendored |= {other["file"] for e in entries.values() for other in e.get("other_originals", [])}
    assert vendored == {p.name for p in TEMPLATES.glob("*.jinja")}, "every vendored template is in the manifest"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_reference_and_llama_cpp_copy_are_the_recorded_files(name: str) -> None:
    entry = manifest()["families"][name]
    pinned = entry["llama_cpp_copy"]
    assert sha256(real_chat_template(pinned["file"])) == pinned["sha256"]
    if entry["reference"] == "original":
        assert sha256(reference_template(name)) == entry["original"]["sha256"]
        # Where llama.cpp's copy was checked against the original, the manifest says whether they are the same.
        same = entry["original"].get("same_as_llama_cpp_copy", False)
        assert (reference_template(name) == real_chat_template(pinned["file"])) is same, "same_as_llama_cpp_copy"
    for other in entry.get("other_originals", []):
        assert other["source"].startswith("https://github.com/"), other["file"]
        assert sha256((TEMPLATES / other["file"]).read_text(encoding="utf-8")) == other["sha256"], other["file"]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_encoder_passes_arguments_in_the_form_the_reference_takes(name: str) -> None:
    """Decided when the encoder is built: JSON text for DeepSeek-V3.1's original, a mapping for the others."""
    assert PromptEncoder(reference_tokenizer(name)).json_arguments is json_text_arguments(name)
    for file in other_originals(name):
        assert PromptEncoder(original_tokenizer(name, file)).json_arguments is json_text_arguments(name), file


def test_deepseek_v31_original_concatenates_arguments_and_the_llama_cpp_copy_encodes_them() -> None:
    original, llama_cpp = reference_tokenizer("deepseek-v3.1"), family_tokenizer("deepseek-v3.1")
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "1"}}}
    messages = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    with pytest.raises(TypeError, match="concatenate"):
        original.apply_chat_template(messages, tokenize=False)
    as_text = {**call, "function": {**call["function"], "arguments": '{"expression": "1"}'}}
    written = '<｜tool▁sep｜>{"expression": "1"}<｜tool▁call▁end｜>'
    assert written in str(
        original.apply_chat_template([messages[0], {**messages[1], "tool_calls": [as_text]}], tokenize=False)
    )
    assert written in str(llama_cpp.apply_chat_template(messages, tokenize=False))
    # Both build: the encoder takes each in its own form.
    assert PromptEncoder(original).json_arguments and not PromptEncoder(llama_cpp).json_arguments


def test_kimi_k2_thinking_original_renders_the_messages_own_call_ids() -> None:
    """llama.cpp's copy regenerates ids (functions.NAME:COUNTER); the original writes the ids it is given."""
    call = {"id": "functions.calculator:7", "type": "function", "function": {"name": "calculator", "arguments": {}}}
    messages = [
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "functions.calculator:7", "content": "R"},
    ]
    text = str(reference_tokenizer("kimi-k2-thinking").apply_chat_template(messages, tokenize=False))
    assert "<|tool_call_begin|>functions.calculator:7<|tool_call_argument_begin|>" in text
    assert "## Return of functions.calculator:7\nR" in text
    assert not PromptEncoder(reference_tokenizer("kimi-k2-thinking")).numbers_calls


def test_a_template_refusing_both_argument_forms_fails_at_construction() -> None:
    """Neither form renders: the encoder is refused when it is built, naming the template's error."""
    tokenizer = copy.deepcopy(reference_tokenizer("deepseek-v3.1"))
    tokenizer.chat_template = reference_template("deepseek-v3.1").replace(
        "+ tool['function']['arguments'] +", "+ undefined_call() +"
    )
    with pytest.raises(PromptError, match="tool result after an assistant tool call"):
        PromptEncoder(tokenizer)


GEMMA4_TOKENS = ("<bos>", "<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>")


def gemma4_tokenizer(template: str) -> Any:
    """A stand-in Gemma-4 tokenizer: the Qwen3 vocabulary plus Gemma-4's turn and tool tokens."""
    tokenizer = copy.deepcopy(family_tokenizer("qwen3"))
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA4_TOKENS], special_tokens=True)
    tokenizer.chat_template = real_chat_template(template)
    tokenizer.eos_token = "<turn|>"
    return tokenizer


def test_gemma4_is_refused_at_construction_naming_the_family_and_the_reason() -> None:
    """Gemma-4 writes a tool result inside the model's own turn after <|tool_response>, with no end of turn."""
    with pytest.raises(PromptError, match="inside the model's own turn") as raised:
        PromptEncoder(gemma4_tokenizer("google-gemma-4-31B-it"))
    assert "Gemma-4's template" in str(raised.value) and "<|tool_response>response:tito_probe_tool" in str(raised.value)
    # Its interleaved variant renders each result as a turn of its own: that one builds.
    PromptEncoder(gemma4_tokenizer("google-gemma-4-31B-it-interleaved"))
