"""Each family is tested on its reference template (the Hugging Face original where one was found), pinned by hash.

The provenance is ``strands_tito/testing/data/templates/manifest.json`` (package data, beside the vendored originals
the harness serves); ``tests/helpers/templates.py`` reads it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from tokenizers import AddedToken

from strands_tito import get_tool_parser
from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import PromptEncoder, PromptError, format_tool_specs
from strands_tito.testing.chat_templates import real_chat_template
from strands_tito.testing.family_tokenizers import family_tokenizer

from ..helpers.agents import calculator
from ..helpers.families import plan, structured
from ..helpers.templates import (
    ENCODERS,
    TEMPLATES,
    json_text_arguments,
    llama_cpp_tokenizer,
    manifest,
    original_encoder,
    original_prompt,
    original_tokenizer,
    other_originals,
    reference_template,
    reference_tokenizer,
    vendored_file,
)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pypi_release(original: dict[str, Any]) -> bool:
    """A pinned release on PyPI, naming the file in it that holds (``path``) or makes (``generated_by``) the text."""
    pinned = original["source"].startswith("https://pypi.org/project/") and original["source"].count("/") == 6
    return pinned and ("path" in original or "generated_by" in original)


def vendored_sha256(file: str) -> str:
    """The hash of a vendored original's bytes, as committed (line ends included)."""
    return hashlib.sha256(vendored_file(file).read_bytes()).hexdigest()


def test_every_family_has_a_recorded_reference() -> None:
    entries = manifest()["families"]
    assert sorted(entries) == sorted(FAMILIES)
    for name, entry in entries.items():
        assert entry["llama_cpp_copy"]["file"] == f"{FAMILIES[name].template}.jinja", name
        assert entry["reference"] in ("original", "llama_cpp_copy"), name
        assert entry["arguments"] in ("mapping", "json_text"), name
        if entry["reference"] == "original":
            assert entry["original"].get("kind", "template") == "template", name
        if "original" in entry:
            # A repository at a commit, or a release on PyPI that holds or generates it (``path`` or ``generated_by``).
            original = entry["original"]
            assert original["source"].startswith("https://github.com/") or pypi_release(original), name
    vendored = {e["original"]["file"] for e in entries.values() if "original" in e}
    vendored |= {e["original"]["file"] for e in manifest()["refused"].values() if "original" in e}
    everyone = [*entries.values(), *manifest()["refused"].values()]
    vendored |= {other["file"] for e in everyone for other in e.get("other_originals", [])}
    on_disk = {p.name for folder in (TEMPLATES, ENCODERS) for p in folder.iterdir() if p.name != "manifest.json"}
    assert vendored == on_disk, "every vendored original is in the manifest"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_reference_and_llama_cpp_copy_are_the_recorded_files(name: str) -> None:
    entry = manifest()["families"][name]
    pinned = entry["llama_cpp_copy"]
    assert sha256(real_chat_template(pinned["file"])) == pinned["sha256"]
    if "original" in entry:
        assert vendored_sha256(entry["original"]["file"]) == entry["original"]["sha256"]
    if entry["reference"] == "original":
        assert sha256(reference_template(name)) == entry["original"]["sha256"]
        # Where llama.cpp's copy was checked against the original, the manifest says whether they are the same.
        same = entry["original"].get("same_as_llama_cpp_copy", False)
        assert (reference_template(name) == real_chat_template(pinned["file"])) is same, "same_as_llama_cpp_copy"
    for other in entry.get("other_originals", []):
        assert other["source"].startswith("https://github.com/") or pypi_release(other), other["file"]
        assert vendored_sha256(other["file"]) == other["sha256"], other["file"]


def test_refused_families_are_the_recorded_files() -> None:
    for name, entry in manifest()["refused"].items():
        assert sha256(real_chat_template(entry["llama_cpp_copy"]["file"])) == entry["llama_cpp_copy"]["sha256"], name
        original = entry["original"]
        assert vendored_sha256(original["file"]) == original["sha256"], name
        for other in entry.get("other_originals", []):
            assert pypi_release(other) and vendored_sha256(other["file"]) == other["sha256"], other["file"]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_encoder_passes_arguments_in_the_form_the_reference_takes(name: str) -> None:
    """Decided when the encoder is built: JSON text for DeepSeek-V3.1's original, a mapping for the others."""
    assert PromptEncoder(reference_tokenizer(name)).json_arguments is json_text_arguments(name)
    for file in other_originals(name):
        assert PromptEncoder(original_tokenizer(name, file)).json_arguments is json_text_arguments(name), file


def test_deepseek_v31_original_concatenates_arguments_and_the_llama_cpp_copy_encodes_them() -> None:
    original, llama_cpp = reference_tokenizer("deepseek-v3.1"), llama_cpp_tokenizer("deepseek-v3.1")
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


@pytest.mark.parametrize("name", ["kimi-k2", "kimi-k2-thinking"])
def test_kimi_k2_original_renders_the_messages_own_call_ids(name: str) -> None:
    """llama.cpp's copies regenerate ids (functions.NAME:COUNTER); the originals write the ids they are given, and
    the encoder, built on the original, leaves the numbering to the messages."""
    call = {"id": "functions.calculator:7", "type": "function", "function": {"name": "calculator", "arguments": {}}}
    messages = [
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "functions.calculator:7", "content": "R"},
    ]
    text = str(reference_tokenizer(name).apply_chat_template(messages, tokenize=False))
    assert "<|tool_call_begin|>functions.calculator:7<|tool_call_argument_begin|>" in text
    assert "## Return of functions.calculator:7\nR" in text
    assert not PromptEncoder(reference_tokenizer(name)).numbers_calls
    assert PromptEncoder(llama_cpp_tokenizer(name)).numbers_calls


@pytest.mark.parametrize(
    ("file", "separators"),
    [(None, (",", ":")), ("moonshotai-Kimi-K2-Thinking-earlier.jinja", None)],
    ids=["main", "earlier"],
)
def test_kimi_k2_thinking_prompt_declares_the_tools_as_its_template_writes_them(
    file: str | None, separators: tuple[str, str] | None
) -> None:
    """Kimi-K2-Thinking's text at main declares the tools as compact JSON (tojson(separators=(',', ':'))), the
    earlier text with tojson()'s default separators: the encoder's first prompt carries each text's own form."""
    tokenizer = (
        reference_tokenizer("kimi-k2-thinking") if file is None else original_tokenizer("kimi-k2-thinking", file)
    )
    tools = format_tool_specs([calculator.tool_spec])
    prompt = PromptEncoder(tokenizer).first_prompt(
        [{"role": "user", "content": [{"text": "U"}]}], [calculator.tool_spec], "S"
    )
    declared = json.dumps(tools, ensure_ascii=False, separators=separators)
    assert f"<|im_system|>tool_declare<|im_middle|>{declared}<|im_end|>" in tokenizer.decode(prompt)


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
    """A stand-in Gemma-4 tokenizer: the Qwen3 vocabulary plus Gemma-4's turn and tool tokens, with ``template`` (a
    file in the sdist; when ``"original"``, TRL's copy of google/gemma-4-E2B-it's current Hub revision; a vendored
    ``.jinja`` file, the manifest's other originals)."""
    tokenizer = copy.deepcopy(family_tokenizer("qwen3"))
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in GEMMA4_TOKENS], special_tokens=True)
    original = manifest()["refused"]["gemma-4"]["original"]
    if template == "original" or template.endswith(".jinja"):
        file = original["file"] if template == "original" else template
        tokenizer.chat_template = (TEMPLATES / file).read_text(encoding="utf-8")
    else:
        tokenizer.chat_template = real_chat_template(template)
    tokenizer.eos_token = "<turn|>"
    return tokenizer


@pytest.mark.parametrize("template", ["google-gemma-4-31B-it", "original", "google-gemma-4-26B-A4B-it.jinja"])
def test_gemma4_is_refused_at_construction_naming_the_family_and_the_reason(template: str) -> None:
    """Gemma-4 writes a tool result inside the model's own turn after <|tool_response>, with no end of turn: on
    llama.cpp's copy, on TRL's copy of the E2B/E4B template's current Hub revision and on the larger models' template
    at main (manifest ``refused``)."""
    with pytest.raises(PromptError, match="inside the model's own turn") as raised:
        PromptEncoder(gemma4_tokenizer(template))
    assert "Gemma-4's template" in str(raised.value) and "<|tool_response>response:tito_probe_tool" in str(raised.value)
    # Its interleaved variant renders each result as a turn of its own: that one builds.
    PromptEncoder(gemma4_tokenizer("google-gemma-4-31B-it-interleaved"))


@pytest.mark.parametrize("thinking", [True, False], ids=["think", "nothink"])
def test_deepseek_v32_llama_cpp_template_renders_what_the_original_encoder_renders(thinking: bool) -> None:
    """DeepSeek-V3.2 ships a Python encoder, not a template; the family is served on llama.cpp's Jinja rendering
    of it. Every prompt of the family episode (single and parallel calls, final answer, second user turn) is the
    original's, but for one place with thinking off: llama.cpp's generation prompt closes an empty think block
    (<think></think>) where the original writes only </think> (the encoder sends the original's:
    tests/providers/test_families.py, test_family_episode)."""
    spec, tokenizer = FAMILIES["deepseek-v3.2"], reference_tokenizer("deepseek-v3.2")
    tools = format_tool_specs([calculator.tool_spec])
    assert tools is not None
    prompts = structured(spec, plan(spec, thinking))
    for k, messages in enumerate(prompts):
        jinja = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False, enable_thinking=thinking
        )
        original = original_prompt("deepseek-v3.2", messages, tools, thinking)
        if not thinking and k < len(prompts) - 1:  # every prompt before the last ends on a generation prompt
            assert jinja.endswith("<think></think>") and original.endswith("</think>"), k
            jinja = jinja.removesuffix("<think></think>") + "</think>"
        assert jinja == original, f"prompt {k}"


#: Calls whose arguments take every DSML value form: string="true" text (with markup-like characters, newlines and
#: spaces at its ends), and string="false" JSON (numbers, booleans, null, arrays, objects).
V32_CALLS: list[dict[str, Any]] = [
    {"expression": "25 * 17"},
    {"text": ' a "quoted"\n<b> & é\n', "n": 3, "x": -1.5, "flag": True, "none": None, "items": [1, "x"], "o": {}},
]


@pytest.mark.parametrize("thinking", [True, False], ids=["think", "nothink"])
@pytest.mark.parametrize("calls", [V32_CALLS[:1], V32_CALLS], ids=["single", "parallel"])
def test_deepseek_v32_parser_reads_what_the_original_encoder_writes(thinking: bool, calls: list[Any]) -> None:
    """The model's turn as DeepSeek's encoder writes it: deepseek_v32 finds the calls the original's own parser
    finds, with the arguments as written."""
    encoder = original_encoder("deepseek-v3.2")
    tool_calls = [
        {"type": "function", "function": {"name": f"tool_{i}", "arguments": json.dumps(arguments)}}
        for i, arguments in enumerate(calls)
    ]
    turn = {"role": "assistant", "content": "Let me check.", "reasoning_content": "R", "tool_calls": tool_calls}
    context = [{"role": "user", "content": "U"}]
    mode = "thinking" if thinking else "chat"
    written = str(encoder.encode_messages([turn], context=context, thinking_mode=mode))
    assert written.endswith("</｜DSML｜function_calls><｜end▁of▁sentence｜>")
    completion = written.split("</think>", 1)[1] if thinking else written
    parsed_by_original = encoder.parse_message_from_completion_text(written, thinking_mode=mode)["tool_calls"]
    ours = get_tool_parser("deepseek_v32").parse(completion)
    assert [(c.name, c.input, c.error) for c in ours] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"]), None) for c in parsed_by_original
    ]
    assert [c.input for c in ours] == calls


def test_devstral_mistral_template_renders_the_episode_as_unsloths_copy() -> None:
    """Mistral's own template (mistral-common's, for Devstral's v13 format) and Unsloth's copy, which users of
    Unsloth's repository load, render every prompt of the family episode alike, in both argument forms."""
    spec, original = FAMILIES["devstral"], reference_tokenizer("devstral")
    unsloth = llama_cpp_tokenizer("devstral")
    assert original.chat_template != unsloth.chat_template
    tools = format_tool_specs([calculator.tool_spec])
    for messages in structured(spec, plan(spec, False)):
        as_text = copy.deepcopy(messages)
        for call in (c for m in as_text for c in m.get("tool_calls", [])):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
        for conversation in (messages, as_text):
            for generation in (True, False):
                rendered = [
                    t.apply_chat_template(conversation, tools=tools, add_generation_prompt=generation, tokenize=False)
                    for t in (original, unsloth)
                ]
                assert rendered[0] == rendered[1]


def test_minimax_m2_original_renders_the_episode_as_llama_cpps_copy() -> None:
    """MiniMax-M2's text at main and llama.cpp's copy (the release text, corrected) render every prompt of the family
    episode alike; without a system message the original introduces the model, llama.cpp's copy does not."""
    spec, original, llama_cpp = (
        FAMILIES["minimax-m2"],
        reference_tokenizer("minimax-m2"),
        llama_cpp_tokenizer("minimax-m2"),
    )
    assert original.chat_template != llama_cpp.chat_template
    tools = format_tool_specs([calculator.tool_spec])
    for messages in structured(spec, plan(spec, True)):
        rendered = [
            t.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
            for t in (original, llama_cpp)
        ]
        assert rendered[0] == rendered[1]
    no_system = [{"role": "user", "content": "U"}]
    default = [str(t.apply_chat_template(no_system, tokenize=False)) for t in (original, llama_cpp)]
    assert "You are MiniMax-M2, a helpful AI assistant built by MiniMax." in default[0]
    assert "You are a helpful assistant." in default[1]


@pytest.mark.parametrize(
    ("name", "beside"),
    [("qwen3", "Qwen-Qwen3-0.6B.jinja"), ("qwen3-coder", None), ("glm-4.6", None)],
    ids=["qwen3-release-text", "qwen3-coder-llama-cpp", "glm-4.6-llama-cpp"],
)
def test_hub_text_at_main_renders_the_episode_as_the_copy_beside_it(name: str, beside: str | None) -> None:
    """The reference (the Hub's text at main) and the text beside it (Qwen3's release text, which the base repositories
    still ship; llama.cpp's copy) render every prompt of the family episode alike, thinking on and off. Qwen3-Coder's
    llama.cpp copy words the tools system prompt its own way, and differs there only."""
    spec, reference = FAMILIES[name], reference_tokenizer(name)
    other = original_tokenizer(name, beside) if beside else llama_cpp_tokenizer(name)
    assert reference.chat_template != other.chat_template
    tools = format_tool_specs([calculator.tool_spec])
    for thinking in (True, False) if spec.thinking else (False,):
        switch = {"enable_thinking": thinking} if spec.thinking else {}
        for messages in structured(spec, plan(spec, thinking)):
            rendered = [
                str(t.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False, **switch))
                for t in (reference, other)
            ]
            if name == "qwen3-coder":
                (system, rest), (llama_cpp_system, llama_cpp_rest) = (r.split("<|im_end|>\n", 1) for r in rendered)
                assert "following functions:" in system and "following tools:" in llama_cpp_system
                rendered = [rest, llama_cpp_rest]
            assert rendered[0] == rendered[1]
