"""The reference chat template of each family for the tests: its Hugging Face original where one was found.

The harness serves it (:func:`strands_tito.testing.chat_templates.reference_chat_template`, installed by
:func:`~strands_tito.testing.family_tokenizers.family_tokenizer`); its ``data/templates/manifest.json`` records, per
family, where the reference comes from: the original, vendored beside the manifest with its source (repository,
commit, path) and sha256, or llama.cpp's copy in the llama-cpp-python sdist, pinned by sha256. Here: llama.cpp's copy
on the family's tokenizer (:func:`llama_cpp_tokenizer`, an extra case), the family's other originals, and DeepSeek-
V3.2's original Python encoder (test data under ``tests/data/templates/``, never shipped or run by the package).
``tests/testing/test_template_provenance.py`` checks every hash.
"""

from __future__ import annotations

import copy
import functools
import json
import types
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerFast

from strands_tito.providers.families import FAMILIES
from strands_tito.testing.chat_templates import (
    VENDORED_TEMPLATES,
    real_chat_template,
    reference_chat_template,
    template_manifest,
)
from strands_tito.testing.family_tokenizers import family_tokenizer

#: The vendored templates (package data) and the folder of the test-only originals (DeepSeek-V3.2's Python encoder).
TEMPLATES = VENDORED_TEMPLATES
ENCODERS = Path(__file__).resolve().parents[1] / "data" / "templates"

manifest = template_manifest
reference_template = reference_chat_template
#: The family's tokenizer as the harness serves it, with its reference template. Treat as read-only.
reference_tokenizer = family_tokenizer


def vendored_file(file: str) -> Path:
    """Where a vendored original of the manifest lies: a template in the package, a Python encoder in tests/data."""
    return ENCODERS / file if file.endswith(".py.txt") else TEMPLATES / file


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
    source = vendored_file(entry["file"]).read_text(encoding="utf-8")
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
def llama_cpp_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The family's tokenizer with llama.cpp's copy of its template (from the sdist), rendered as an extra case where
    it differs from the reference. Treat as read-only."""
    return _with_template(name, real_chat_template(FAMILIES[name].template))


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
