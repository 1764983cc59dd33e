"""The reference chat template of each family for the tests: its Hugging Face original where one was found.

``tests/data/templates/manifest.json`` records, per family, where its reference template comes from: the original,
vendored beside the manifest with its source (repository, commit, path) and sha256, or llama.cpp's copy in the
llama-cpp-python sdist, pinned by sha256. ``tests/testing/test_template_provenance.py`` checks every hash.
"""

from __future__ import annotations

import copy
import functools
import json
import types
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerFast

from strands_tito.testing.chat_templates import real_chat_template
from strands_tito.testing.family_tokenizers import family_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


@functools.cache
def manifest() -> dict[str, Any]:
    """The provenance of each family's reference template (``families`` by family name)."""
    loaded: dict[str, Any] = json.loads((TEMPLATES / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def reference_template(name: str) -> str:
    """The family's reference template: the vendored original, else llama.cpp's copy from the sdist."""
    entry = manifest()["families"][name]
    if entry["reference"] == "original":
        return (TEMPLATES / entry["original"]["file"]).read_text(encoding="utf-8")
    return real_chat_template(entry["llama_cpp_copy"]["file"])


def json_text_arguments(name: str) -> bool:
    """Whether the family's reference template takes a call's arguments as JSON text (else a mapping)."""
    return bool(manifest()["families"][name]["arguments"] == "json_text")


def thinking_switch(name: str) -> str:
    """The name of the reference template's thinking variable (``enable_thinking`` unless the manifest says)."""
    return str(manifest()["families"][name].get("thinking_switch", "enable_thinking"))


def other_originals(name: str) -> list[str]:
    """The files of the family's other verified originals (another repository's text), which its tests render too."""
    return [entry["file"] for entry in manifest()["families"][name].get("other_originals", [])]


@functools.cache
def original_encoder(name: str) -> types.ModuleType:
    """The family's original Python encoder (DeepSeek-V3.2 ships one instead of a template), loaded from its
    vendored text: test data, never imported by the product."""
    entry = manifest()["families"][name]["original"]
    assert entry["kind"] == "python_encoder", name
    module = types.ModuleType(entry["file"].removesuffix(".py.txt"))
    source = (TEMPLATES / entry["file"]).read_text(encoding="utf-8")
    exec(compile(source, entry["file"], "exec"), module.__dict__)
    return module


def original_prompt(name: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], thinking: bool) -> str:
    """The prompt the family's original encoder renders for a structured conversation (ending on its generation
    prompt): the tools ride on the system message, a call's arguments are JSON text."""
    as_text = copy.deepcopy(messages)
    as_text[0]["tools"] = tools
    for message in as_text:
        for call in message.get("tool_calls", []):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
    mode = "thinking" if thinking else "chat"
    return str(original_encoder(name).encode_messages(as_text, thinking_mode=mode))


@functools.cache
def reference_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The family's tokenizer (:func:`family_tokenizer`) with its reference template. Treat as read-only."""
    return _with_template(name, reference_template(name))


@functools.cache
def original_tokenizer(name: str, file: str) -> PreTrainedTokenizerFast:
    """The family's tokenizer with the vendored original ``file`` (of :func:`other_originals`). Treat as read-only."""
    return _with_template(name, (TEMPLATES / file).read_text(encoding="utf-8"))


def _with_template(name: str, template: str) -> PreTrainedTokenizerFast:
    tokenizer = family_tokenizer(name)
    if tokenizer.chat_template == template:
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = template
    return tokenizer
