"""Property: a well-formed call rendered by the family's REAL chat template parses back to exactly that call.

Hypothesis generates tool names and arguments, the real Hugging Face template renders an assistant message with
structured ``tool_calls``, the assistant's generated part (after its header, end-of-turn token included) is parsed,
and the calls must come back with the same names, the same arguments (types included) and, for Kimi-K2, the id the
template wrote.

Constraints, and why:
* Strings never contain the format's own markup (its call delimiters, stop tokens, reasoning tags): the formats have
  no escaping for them, so such a string cannot be represented (other markup-like text is generated on purpose).
* XML formats (qwen_xml, glm, minimax_m2) write values as raw text typed by the tool's schema, so each parameter's
  schema declares its generated type and parameter names are identifiers (they sit inside tags). Qwen's template
  writes scalars with Jinja's ``string`` filter, so a top-level ``None`` becomes ``None`` there, which no JSON schema
  type reads back; qwen_xml gets no top-level nulls.
* gpt-oss and Llama 3 templates render one call per message.
* Seed-OSS writes a non-string value with Jinja's ``string`` filter (Python's spelling), so it gets scalars only
  (strings, integers, floats, booleans): a list, a dict or None is not representable in its format.
* DeepSeek-V3.1's original takes the arguments as JSON text; the others take a mapping.
* Where a family's Hugging Face original differs from llama.cpp's copy (Qwen3, QwQ, Qwen3-Coder, GLM-4.6,
  DeepSeek-V3.1, Kimi-K2-Instruct, MiniMax-M2), both are rendered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerBase

from strands_tito.providers.tool_parsers import get_tool_parser

from ..helpers.templates import reference_template

THINK = ("<think>", "</think>")


@dataclass(frozen=True)
class Family:
    template: str
    parser: str
    header: str  # the assistant header; the generated part follows its last occurrence
    reserved: tuple[str, ...]  # markup a string value cannot contain in this format
    xml: bool = False
    single_call: bool = False
    model_ids: Callable[[list[str]], list[str]] | None = None
    scalars_only: bool = False
    json_text: bool = False
    eos_token: str | None = None  # the family's, where its template writes the tokenizer's (Mistral)
    original: str | None = None  # the family whose vendored Hugging Face original is rendered (the harness's reference)


HERMES = ("<tool_call>", "</tool_call>", "<|im_end|>", "<|endoftext|>", *THINK)
QWEN_XML = (*HERMES, "<function=", "</function>", "<parameter=", "</parameter>")
GLM = (
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<|observation|>",
    "<|user|>",
    "<|endoftext|>",
    *THINK,
)
KIMI = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_end|>",
    "<|tool_call_argument_begin|>",
    "<|im_end|>",
    *THINK,
)
DEEPSEEK = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜end▁of▁sentence｜>",
    *THINK,
)
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>")
LLAMA = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>", *THINK)
MINIMAX = (
    "<minimax:tool_call>",
    "</minimax:tool_call>",
    "<invoke",
    "</invoke>",
    "<parameter name=",
    "</parameter>",
    "[e~[",
    *THINK,
)

DSML = (
    "｜DSML｜",
    "function_calls>",
    "tool_calls>",
    "invoke name=",
    "</｜DSML｜",
    "<｜end▁of▁sentence｜>",
    *THINK,
)
MISTRAL = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "</s>", "[THINK]", "[/THINK]", "[TOOL_RESULTS]")
SEED = (
    "<seed:tool_call>",
    "</seed:tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<seed:eos>",
    "<seed:think>",
    "</seed:think>",
)

FAMILIES = [
    Family("Qwen-Qwen3-0.6B", "hermes", "<|im_start|>assistant\n", HERMES),
    Family("Qwen-QwQ-32B", "hermes", "<|im_start|>assistant\n", HERMES),
    Family("Qwen-Qwen2.5-7B-Instruct", "hermes", "<|im_start|>assistant\n", HERMES),
    Family("Qwen3-Coder", "qwen_xml", "<|im_start|>assistant", QWEN_XML, xml=True),
    Family("Qwen3.5-4B", "qwen_xml", "<|im_start|>assistant", QWEN_XML, xml=True),
    Family("GLM-4.6", "glm", "<|assistant|>", GLM, xml=True),
    Family("GLM-4.7-Flash", "glm", "<|assistant|>", GLM, xml=True),
    # The Kimi-K2-Instruct/-Thinking files call list.append, which transformers' sandbox refuses; this one renders
    # calls the same way. The template numbers calls across the conversation: functions.NAME:0, :1, ...
    Family(
        "moonshotai-Kimi-K2",
        "kimi_k2",
        "<|im_assistant|>assistant<|im_middle|>",
        KIMI,
        model_ids=lambda names: [f"functions.{n}:{i}" for i, n in enumerate(names)],
    ),
    Family("deepseek-ai-DeepSeek-V3.1", "deepseek_v31", "<｜Assistant｜>", DEEPSEEK),
    Family("openai-gpt-oss-120b", "gpt_oss", "<|start|>assistant", HARMONY, single_call=True),
    Family(
        "meta-llama-Llama-3.1-8B-Instruct",
        "llama3_json",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        LLAMA,
        single_call=True,
    ),
    Family(
        "meta-llama-Llama-3.3-70B-Instruct",
        "llama3_json",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        LLAMA,
        single_call=True,
    ),
    Family("MiniMax-M2", "minimax_m2", "]~b]ai\n", MINIMAX, xml=True),
    Family("deepseek-ai-DeepSeek-V3.2", "deepseek_v32", "<｜Assistant｜>", DSML, xml=True),
    Family("deepseek-ai-DeepSeek-V4", "deepseek_v4", "<｜Assistant｜>", DSML, xml=True),
    Family("unsloth-mistral-Devstral-Small-2507", "mistral", "[/INST]", MISTRAL, eos_token="</s>"),
    Family("mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "[/INST]", MISTRAL, eos_token="</s>"),
    # Mistral-Small-3.2 writes each call's id ([CALL_ID]) and renders it back in the result: the model's ids are kept.
    Family(
        "Mistral-Small-3.2-24B-Instruct-2506",
        "mistral",
        "[/INST]",
        MISTRAL,
        model_ids=lambda names: [call_id(i) for i in range(len(names))],
        eos_token="</s>",
    ),
    Family("ByteDance-Seed-OSS", "seed_oss", "<seed:bos>assistant", SEED, xml=True, scalars_only=True),
    # The Hugging Face originals that differ from llama.cpp's copy (strands_tito/testing/data/templates/manifest.json).
    Family(
        "deepseek-v3.1-original", "deepseek_v31", "<｜Assistant｜>", DEEPSEEK, json_text=True, original="deepseek-v3.1"
    ),
    Family("qwq-original", "hermes", "<|im_start|>assistant\n", HERMES, original="qwq"),
    Family("Qwen-Qwen3-0.6B-original", "hermes", "<|im_start|>assistant\n", HERMES, original="qwen3"),
    Family(
        "Qwen-Qwen3-Coder-30B-A3B-Instruct-original",
        "qwen_xml",
        "<|im_start|>assistant",
        QWEN_XML,
        xml=True,
        original="qwen3-coder",
    ),
    Family("zai-org-GLM-4.6-original", "glm", "<|assistant|>", GLM, xml=True, original="glm-4.6"),
    # Kimi-K2-Instruct-0905's original writes each call's own id (llama.cpp's copy numbers them), here ids not
    # counted from 0, as a conversation's later calls are.
    Family(
        "moonshotai-Kimi-K2-Instruct-0905-original",
        "kimi_k2",
        "<|im_assistant|>assistant<|im_middle|>",
        KIMI,
        model_ids=lambda names: [f"functions.{n}:{i + 5}" for i, n in enumerate(names)],
        original="kimi-k2",
    ),
    # Kimi-K2-Thinking's original at main (compact tool declaration) writes the calls as Kimi-K2-Instruct's does.
    Family(
        "moonshotai-Kimi-K2-Thinking-original",
        "kimi_k2",
        "<|im_assistant|>assistant<|im_middle|>",
        KIMI,
        model_ids=lambda names: [f"functions.{n}:{i + 5}" for i, n in enumerate(names)],
        original="kimi-k2-thinking",
    ),
    Family("MiniMaxAI-MiniMax-M2-original", "minimax_m2", "]~b]ai\n", MINIMAX, xml=True, original="minimax-m2"),
]


def call_id(index: int) -> str:
    """Nine letters or digits: Mistral's templates refuse other ids."""
    return f"c{index:08d}"


# Markup-like pieces strings are built from (with ordinary and non-ASCII text), so values look like the formats.
FRAGMENTS = sorted(
    {
        "<",
        ">",
        "</",
        "/>",
        "{",
        "}",
        "[",
        "]",
        '"',
        "\\",
        "\n",
        " ",
        ":",
        "=",
        "|",
        "é",
        "中",
        "😀",
        "\u2028",
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "<|im_end|>",
        "<function=x>",
        "<parameter=y>",
        "</parameter>",
        "<arg_key>",
        "</arg_value>",
        "<|tool_call_end|>",
        "<｜tool▁sep｜>",
        "<|call|>",
        "<|end|>",
        "<|start|>",
        '<invoke name="q">',
        "[e~[",
        "<|eot_id|>",
        "<|python_tag|>",
        "null",
        "true",
        "42",
    }
)


def strings(reserved: tuple[str, ...]) -> st.SearchStrategy[str]:
    pieces = st.one_of(st.text(max_size=4), st.sampled_from([f for f in FRAGMENTS if f not in reserved]))
    return st.lists(pieces, max_size=6).map("".join).filter(lambda s: not any(r in s for r in reserved))


def json_values(reserved: tuple[str, ...], scalars_only: bool = False) -> st.SearchStrategy[Any]:
    text = strings(reserved)
    if scalars_only:
        # No edged strings either: values are not at a line's edges in these formats, but keep them simple.
        return st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), text)
    # Whitespace at a value's edges is data: the XML formats' own newlines around a value must not eat it.
    edged = text.map(lambda s: f"\n {s}\n")
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), text, edged
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings(reserved), inner, max_size=3),
        max_leaves=8,
    )


SCHEMA_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,15}", fullmatch=True)
XML_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@st.composite
def tool_calls(draw: st.DrawFn, family: Family) -> list[tuple[str, dict[str, Any]]]:
    count = 1 if family.single_call else draw(st.integers(1, 3))
    names = draw(st.lists(NAMES, min_size=count, max_size=count, unique=True))
    values = json_values(family.reserved, family.scalars_only)
    if family.xml and family.parser == "qwen_xml":
        values = values.filter(lambda v: v is not None)
    keys = XML_KEYS if family.xml else strings(family.reserved)
    return [(name, draw(st.dictionaries(keys, values, max_size=4))) for name in names]


def tagged(value: Any) -> Any:
    """The value with its JSON types made explicit (``True == 1`` in Python, not in a tool call)."""
    if isinstance(value, dict):
        return {k: tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return [tagged(v) for v in value]
    return (type(value).__name__, value)


def render(
    tokenizer: PreTrainedTokenizerBase, template: str, calls: list[tuple[str, dict[str, Any]]], family: Family
) -> str:
    parameters = {"type": "object", "properties": {}}
    tools = [
        {"type": "function", "function": {"name": n, "description": "t", "parameters": parameters}} for n, _ in calls
    ]
    # The ids the model would have written, where the family's parser reads them (its template renders them).
    ids = family.model_ids([n for n, _ in calls]) if family.model_ids else [call_id(i) for i in range(len(calls))]
    structured = [
        {
            "id": ids[i],
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(a) if family.json_text else a},
        }
        for i, (n, a) in enumerate(calls)
    ]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": structured}]
    special = {"eos_token": family.eos_token} if family.eos_token else {}
    rendered = tokenizer.apply_chat_template(
        messages, tools=tools, chat_template=template, tokenize=False, add_generation_prompt=False, **special
    )
    assert isinstance(rendered, str)
    return rendered


def specs_for(calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    specs = []
    for name, arguments in calls:
        properties = {k: {"type": SCHEMA_TYPES[type(v)]} for k, v in arguments.items()}
        schema = {"type": "object", "properties": properties}
        specs.append({"name": name, "description": "t", "inputSchema": {"json": schema}})
    return specs


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.template)
def test_real_template_round_trip(
    family: Family, qwen3: PreTrainedTokenizerBase, real_template: Callable[[str], str]
) -> None:
    template = reference_template(family.original) if family.original else real_template(family.template)
    parser = get_tool_parser(family.parser)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(calls=tool_calls(family))
    def round_trip(calls: list[tuple[str, dict[str, Any]]]) -> None:
        rendered = render(qwen3, template, calls, family)
        generated = rendered[rendered.rindex(family.header) + len(family.header) :]
        parsed = parser.parse(generated, specs_for(calls))
        assert [c.error for c in parsed] == [None] * len(calls), generated
        assert [(c.name, tagged(c.input)) for c in parsed] == [(n, tagged(a)) for n, a in calls]
        if family.model_ids is not None:
            assert [c.id for c in parsed] == family.model_ids([n for n, _ in calls])
        assert len({c.id for c in parsed}) == len(parsed)

    round_trip()
