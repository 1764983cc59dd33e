"""Every chat template in the llama-cpp-python sdist is served or refused when the model is built, never guessed.

A template that is a supported family's runs on that family's tokenizer (its real vocabulary or stand-in, with its
eos and special tokens) and must be served. Every other template runs on a stand-in tokenizer: the Qwen3 vocabulary
plus the special tokens the template writes. Either ``tool_parser="auto"`` or the prompt encoder refuses it with a
message saying why, or both build and then a tool call the template itself writes is read back as exactly that call
(it never ends up as final answer text), and the tool result after it is encoded from the template's own rendering.
"""

from __future__ import annotations

import copy
import json
import os
import re
from typing import Any

import pytest
from tokenizers import AddedToken

from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import PromptEncoder, PromptError
from strands_tito.providers.tool_parsers import ToolParserDetectionError, get_tool_parser
from strands_tito.testing.chat_templates import real_templates_dir
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

from ..helpers.templates import llama_cpp_tokenizer

TEMPLATES = sorted(p.stem for p in real_templates_dir().glob("*.jinja"))
#: The sdist templates that are a supported family's template, by file name: served on the family's tokenizer.
FAMILY_OF = {f.template: f.name for f in FAMILIES.values()}
SPECIAL = re.compile(
    r"<\|[^|<>\s]{1,40}\|>|<｜[^｜<>]{1,40}｜>|\[/?[A-Z_]{2,30}\]|</?seed:[a-z_]+>|<\|[a-z_\"]{1,20}>|<[a-z_\"]{1,20}\|>"
    r"|\]~b\]|\]~!b\[|\[e~\[|</?s>|<bos>"
)
ARGUMENTS = {"expression": "25 * 17"}
SPEC: Any = {
    "name": "calculator",
    "description": "Evaluate.",
    "inputSchema": {"json": {"type": "object", "properties": {"expression": {"type": "string"}}}},
}
#: How a refusal starts: auto cannot choose a parser, or the encoder cannot follow the template.
REFUSALS = ("cannot choose a tool parser", "the chat template ")


def stand_in(template: str) -> Any:
    tokenizer = copy.deepcopy(build_qwen3_tokenizer())
    found = sorted(set(SPECIAL.findall(template)) - set(tokenizer.get_added_vocab()))
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in found], special_tokens=True)
    tokenizer.chat_template = template
    if "</s>" in found or "[INST]" in found:  # Mistral's templates write the eos token (</s>) after a call
        tokenizer.eos_token = "</s>"
    return tokenizer


def written_turn(encoder: PromptEncoder, messages: list[dict[str, Any]], tools: Any) -> str:
    """The assistant turn with one calculator call, as the template writes it after its generation prompt."""
    arguments = json.dumps(ARGUMENTS) if encoder.json_arguments else ARGUMENTS
    call = {"id": "call00000", "type": "function", "function": {"name": "calculator", "arguments": arguments}}
    prompt = encoder.render(messages, tools=tools, add_generation_prompt=True)
    text = encoder.render(
        [*messages, {"role": "assistant", "content": "", "tool_calls": [call]}],
        tools=tools,
        add_generation_prompt=False,
    )
    shared = len(os.path.commonprefix([text, prompt]))  # noqa: RUF071 (strings, not paths)
    if shared < len(prompt):  # the template re-renders only part of its generation prompt: cut at a tag or line
        shared = max(text.rfind(">", 0, shared), text.rfind("\n", 0, shared)) + 1
    return text[shared:]


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_sdist_template_is_served_or_refused(name: str) -> None:
    if name in FAMILY_OF:
        tokenizer = llama_cpp_tokenizer(FAMILY_OF[name])
    else:
        tokenizer = stand_in((real_templates_dir() / f"{name}.jinja").read_text(encoding="utf-8"))
    try:
        parser = get_tool_parser("auto", tokenizer=tokenizer)
        encoder = PromptEncoder(tokenizer)
    except (ToolParserDetectionError, PromptError) as e:
        assert name not in FAMILY_OF, f"{FAMILY_OF[name]}'s template is refused: {e}"
        assert str(e).startswith(REFUSALS), str(e)
        return
    tools: Any = [
        {
            "type": "function",
            "function": {"name": "calculator", "description": "Evaluate.", "parameters": SPEC["inputSchema"]["json"]},
        }
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "25 * 17?"}]
    output = written_turn(encoder, messages, tools if encoder.tools_in_template else None)
    calls = parser.parse(output, [SPEC])
    assert [(c.error, c.name, c.input) for c in calls] == [(None, "calculator", ARGUMENTS)], output
    use = {"toolUseId": calls[0].id, "name": "calculator", "input": ARGUMENTS}
    result: Any = {"toolResult": {"toolUseId": calls[0].id, "status": "success", "content": [{"text": "425"}]}}
    previous: Any = {"role": "assistant", "content": [{"text": output}, {"toolUse": use}]}
    ids = encoder.continuation([{"role": "user", "content": [result]}], previous, encoder.encode(output))
    assert "425" in str(tokenizer.decode(ids, skip_special_tokens=False))
