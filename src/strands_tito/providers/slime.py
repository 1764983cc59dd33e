"""Helpers for slime's custom rollout functions: cached clients and tokenizers built from slime's arguments."""

from __future__ import annotations

import functools
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from strands_tito.providers.client import SGLangClient


@functools.cache
def get_client(base_url: str, **kwargs: Any) -> SGLangClient:
    """One shared :class:`SGLangClient` per URL and settings (so rollouts share one connection pool)."""
    return SGLangClient(base_url, **kwargs)


def get_client_from_slime_args(args: Any, **kwargs: Any) -> SGLangClient:
    """The shared client for slime's SGLang router, with a pool sized like slime's own HTTP client.

    Reads ``sglang_router_ip``, ``sglang_router_port``, ``sglang_server_concurrency``, ``rollout_num_gpus`` and
    ``rollout_num_gpus_per_engine`` from slime's parsed arguments; ``kwargs`` go to :class:`SGLangClient`.
    """
    base_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    engines = max(1, args.rollout_num_gpus // max(1, args.rollout_num_gpus_per_engine))
    kwargs.setdefault("max_connections", max(1, args.sglang_server_concurrency * engines))
    return get_client(base_url, **kwargs)


@functools.cache
def get_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """Load (once per process) the tokenizer at ``path``."""
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    return tokenizer
