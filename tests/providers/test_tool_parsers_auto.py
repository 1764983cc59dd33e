"""Choosing the parser (``tool_parser="auto"``, the default), the foreign-markup warning, and 0.6.2's names."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from strands_tito import SGLangModel
from strands_tito.providers.families import FAMILIES
from strands_tito.providers.tool_parsers import (
    TOOL_PARSERS,
    GLMToolParser,
    HermesToolParser,
    ToolParserDetectionError,
    detect_tool_parser,
    foreign_markup,
    get_tool_parser,
    warn_foreign_markup,
)
from strands_tito.testing.engine import Reply, Script
from strands_tito.testing.family_tokenizers import family_tokenizer

from ..helpers.agents import calculator, make_agent, make_model
from ..helpers.templates import TEMPLATES, other_originals, reference_template
from ..helpers.tool_calls import (
    D_CALL,
    DB,
    DE,
    G_OK,
    H_OK,
    K_CALL,
    KB,
    KE,
    L_OK,
    M_OK,
    MI_OK,
    O_CALL,
    Q_OK,
    S_OK,
    V4_OK,
    V32_OK,
)

REAL_TEMPLATES = {
    "Qwen-Qwen3-0.6B": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen3-Coder": "qwen_xml",
    "Qwen3.5-4B": "qwen_xml",
    "GLM-4.6": "glm",
    "GLM-4.7-Flash": "glm",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "moonshotai-Kimi-K2": "kimi_k2",
    "deepseek-ai-DeepSeek-V3.1": "deepseek_v31",
    "openai-gpt-oss-120b": "gpt_oss",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3_json",
    "MiniMax-M2": "minimax_m2",
    "deepseek-ai-DeepSeek-V3.2": "deepseek_v32",
    "deepseek-ai-DeepSeek-V4": "deepseek_v4",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek_v4",
    "unsloth-mistral-Devstral-Small-2507": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "ByteDance-Seed-OSS": "seed_oss",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen_xml",
    "ibm-granite-granite-4.0": "hermes",
    "StepFun3.5-Flash": "qwen_xml",
}

OUTPUTS = {
    "hermes": H_OK,
    "qwen_xml": Q_OK,
    "glm": G_OK,
    "kimi_k2": KB + K_CALL + KE,
    "deepseek_v31": DB + D_CALL + DE,
    "gpt_oss": O_CALL,
    "llama3_json": L_OK,
    "minimax_m2": M_OK,
    "deepseek_v32": V32_OK,
    "deepseek_v4": V4_OK,
    "mistral": MI_OK,
    "seed_oss": S_OK,
}


def tokenizer_like(template: Any = None, tokens: tuple[str, ...] = ()) -> Any:
    return SimpleNamespace(chat_template=template, all_special_tokens=list(tokens))


@pytest.mark.parametrize(("template", "expected"), sorted(REAL_TEMPLATES.items()))
def test_detects_each_family_from_its_real_template(
    template: str, expected: str, real_template: Callable[[str], str]
) -> None:
    tokenizer = tokenizer_like(real_template(template))
    assert detect_tool_parser(tokenizer) == expected
    assert get_tool_parser("auto", tokenizer=tokenizer).name == expected


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_detects_each_family_from_its_reference_template(name: str) -> None:
    """The family's reference template (its Hugging Face original where one is vendored), and its other vendored
    originals, pick the family's parser."""
    tokens = tuple(family_tokenizer(name).all_special_tokens)
    others = [(TEMPLATES / file).read_text(encoding="utf-8") for file in other_originals(name)]
    for template in [reference_template(name), *others]:
        assert detect_tool_parser(tokenizer_like(template, tokens)) == FAMILIES[name].parser


def test_templates_without_tool_calls_are_not_guessed(real_template: Callable[[str], str]) -> None:
    with pytest.raises(ToolParserDetectionError, match="match none") as raised:
        detect_tool_parser(tokenizer_like(real_template("google-gemma-2-2b-it")))
    for name in TOOL_PARSERS:
        assert name in str(raised.value)


#: Templates that write tool calls in a format no parser reads, and a piece of what they write. Each one's tokenizer
#: may have another family's special tokens (every DeepSeek-V3 tokenizer has <｜tool▁calls▁begin｜>): never a guess.
UNREAD_FORMATS = {
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "<｜tool▁call▁begin｜>function<｜tool▁sep｜>tito_probe_tool",
    "google-gemma-4-31B-it": "<|tool_call>call:tito_probe_tool{a:1}<tool_call|>",
    "LFM2.5-8B-A1B": "[tito_probe_tool(a=1)]",
    "upstage-Solar-Open-100B": "<|tool_call:name|>tito_probe_tool<|tool_call:args|>",
}


@pytest.mark.parametrize(("template", "written"), sorted(UNREAD_FORMATS.items()))
def test_templates_of_unread_formats_are_refused_naming_what_they_write(
    template: str, written: str, real_template: Callable[[str], str]
) -> None:
    deepseek_tokens = ("<｜tool▁calls▁begin｜>",)
    with pytest.raises(ToolParserDetectionError, match="writes tool calls as") as raised:
        detect_tool_parser(tokenizer_like(real_template(template), deepseek_tokens))
    assert written in str(raised.value)


def test_the_project_tokenizer_is_hermes(qwen3: PreTrainedTokenizerBase) -> None:
    assert detect_tool_parser(qwen3) == "hermes"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (("<|tool_calls_section_begin|>",), "kimi_k2"),
        (("<｜tool▁calls▁begin｜>",), "deepseek_v31"),
        (("<|call|>", "<|channel|>"), "gpt_oss"),
        (("<|python_tag|>",), "llama3_json"),
        (("<arg_key>", "<|observation|>"), "glm"),
        (("<minimax:tool_call>",), "minimax_m2"),
    ],
)
def test_special_tokens_decide_without_a_template(tokens: tuple[str, ...], expected: str) -> None:
    assert detect_tool_parser(tokenizer_like(None, tokens)) == expected


def test_undecidable_tokenizers_fail_with_the_list_of_parsers() -> None:
    # Qwen's <tool_call> token is shared by hermes and qwen_xml models: it decides nothing.
    with pytest.raises(ToolParserDetectionError, match="match none"):
        detect_tool_parser(tokenizer_like(None, ("<tool_call>",)))
    both = "<|tool_calls_section_begin|><|tool_call_argument_begin|> <tool_call><arg_key><arg_value>"
    with pytest.raises(ToolParserDetectionError, match=r"several formats \['glm', 'kimi_k2'\]"):
        detect_tool_parser(tokenizer_like(both))
    with pytest.raises(ValueError, match="needs the tokenizer"):
        get_tool_parser("auto")
    with pytest.raises(ValueError, match="unknown tool parser"):
        get_tool_parser("nope")


def test_named_templates_are_all_read() -> None:
    tokenizer = tokenizer_like({"default": "no tools here", "tool_use": "<minimax:tool_call><invoke name="})
    assert detect_tool_parser(tokenizer) == "minimax_m2"


def test_models_choose_their_parser(qwen3: PreTrainedTokenizerBase) -> None:
    assert isinstance(SGLangModel(tokenizer=qwen3, base_url="http://127.0.0.1:9").tool_parser, HermesToolParser)
    model = SGLangModel(tokenizer=qwen3, base_url="http://127.0.0.1:9", tool_parser="auto")
    assert isinstance(model.tool_parser, HermesToolParser)
    model = SGLangModel(tokenizer=qwen3, base_url="http://127.0.0.1:9", tool_parser="glm")
    assert isinstance(model.tool_parser, GLMToolParser)
    with pytest.raises(ToolParserDetectionError):
        SGLangModel(tokenizer=tokenizer_like("plain chat"), base_url="http://127.0.0.1:9", tool_parser="auto")


PLAIN_CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


async def test_a_template_without_tool_calls_serves_tool_less_agents(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    # By default an undecidable format only matters once tools are offered: then it fails before anything is sent.
    tokenizer = copy.deepcopy(qwen3)
    tokenizer.chat_template = PLAIN_CHATML
    engine = start_engine(Script(turns=[Reply(text="Paris.")]), tokenizer=tokenizer)
    model = make_model(engine, tokenizer)
    assert str(await make_agent(model, system_prompt=None).invoke_async("Capital of France?")).strip() == "Paris."
    requests = len(engine.records)
    with pytest.raises(ToolParserDetectionError, match="match none"):
        await make_agent(make_model(engine, tokenizer), [calculator], system_prompt=None).invoke_async("2 + 2?")
    assert len(engine.records) == requests


@pytest.mark.parametrize("own", sorted(OUTPUTS))
def test_each_format_is_foreign_to_every_other_parser(own: str) -> None:
    text = OUTPUTS[own]
    parsers = TOOL_PARSERS.values()
    assert foreign_markup(get_tool_parser(own), text, parsers) == []
    for other in TOOL_PARSERS:
        if other != own:
            assert foreign_markup(get_tool_parser(other), text, parsers) == [own], other


def test_markup_no_parser_reads_recommends_no_parser() -> None:
    """Seed-OSS writes <function=...> inside <seed:tool_call>: qwen_xml's markup, but qwen_xml reads no call there."""
    seed = (
        "<seed:tool_call>\n<function=calculator>\n<parameter=expression>2 + 2</parameter>\n</function>\n"
        "</seed:tool_call>"
    )
    assert get_tool_parser("qwen_xml").parse(seed) == []
    # qwen_xml's markup pattern matches, but only seed_oss reads the call, so only it is named.
    assert foreign_markup(get_tool_parser("hermes"), seed, TOOL_PARSERS.values()) == ["seed_oss"]
    others = [p for p in TOOL_PARSERS.values() if p.name != "seed_oss"]
    assert foreign_markup(get_tool_parser("hermes"), seed, others) == []
    # Another format's markup that its parser finds malformed names no parser either.
    assert foreign_markup(get_tool_parser("hermes"), KB + "junk" + KE, TOOL_PARSERS.values()) == []


def test_foreign_markup_warns_once_per_format(caplog: pytest.LogCaptureFixture) -> None:
    parser = get_tool_parser("hermes")
    with caplog.at_level(logging.WARNING, logger="strands_tito.providers.tool_parsers.detect"):
        assert warn_foreign_markup(parser, G_OK) == ["glm"]
        assert warn_foreign_markup(parser, G_OK) == []
        assert warn_foreign_markup(parser, "plain answer") == []
        assert warn_foreign_markup(parser, KB + K_CALL + KE) == ["kimi_k2"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "matching_parser=<glm>" in warnings[0] and "tool_parser='glm'" in warnings[0]


async def test_the_model_warns_about_foreign_markup_in_its_output(
    start_engine: Any, qwen3: PreTrainedTokenizerBase, caplog: pytest.LogCaptureFixture
) -> None:
    kimi = "Let me compute. " + KB + K_CALL + KE  # not hermes markup: a plain answer for this model
    engine = start_engine(Script(turns=[Reply(text=kimi), Reply(text=kimi)]))
    model = make_model(engine, qwen3)
    with caplog.at_level(logging.WARNING, logger="strands_tito.providers.tool_parsers.detect"):
        agent = make_agent(model, [calculator])
        await agent.invoke_async("Go")
        await agent.invoke_async("Again")
    assert [r.getMessage().count("matching_parser=<kimi_k2>") for r in caplog.records] == [1]
