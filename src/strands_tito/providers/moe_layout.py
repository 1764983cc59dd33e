"""The routed-experts layout of the served MoE model, found without the user: from the model's ``config.json``.

SGLang returns routing as headerless int32 (docs/providers.md): ``(rows, num_hidden_layers,
num_experts_per_tok)`` from the model's Hugging Face text config. Without those numbers the routing cannot be shaped
into the ``.npy`` a trainer reads (Agent Lightning's R3, ``agent-lightning.md`` §8), and a record would go out without
it. So :class:`~strands_tito.providers.sglang.SGLangModel` asked for routing finds the layout here, at construction,
or refuses to be built:

1. the tokenizer's own folder (``AutoTokenizer.from_pretrained("/models/Qwen3-30B-A3B")``: ``name_or_path``), or the
   Hugging Face cache when the tokenizer came from a Hub id (read offline, never downloaded);
2. the server's model path (``GET /model_info``, ``/get_model_info`` on older servers and routers, or
   ``/server_info``): the folder SGLang was started with, when this machine sees it, or its Hub id in the cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from strands_tito.errors import StrandsTitoError

__all__ = ["RoutedExpertsLayoutError", "find_layout", "layout_of_config"]

#: How each family's config names the number of routed experts (Qwen-MoE / OLMoE; DeepSeek, Kimi-K2, GLM-4.5+;
#: Mixtral, gpt-oss, Llama-4, MiniMax, Phi-MoE).
_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
#: SGLang's routes that report the model path, newest first.
_INFO_PATHS = ("/model_info", "/get_model_info", "/server_info", "/get_server_info")
_SERVER_TIMEOUT = 5.0


class RoutedExpertsLayoutError(StrandsTitoError, ValueError):
    """``return_routed_experts=True`` but the layout is neither given nor found; the message says what to pass."""


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def layout_of_config(config: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """``(num_hidden_layers, num_experts_per_tok, num_experts)`` of a Hugging Face ``config.json`` (its
    ``text_config`` for a vision-language model), or None when it describes no MoE model."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and "num_experts_per_tok" in text:
        config = text
    layers = _positive_int(config.get("num_hidden_layers"))
    top_k = _positive_int(config.get("num_experts_per_tok"))
    experts = next((n for key in _EXPERT_KEYS if (n := _positive_int(config.get(key))) is not None), None)
    if layers is None or top_k is None or experts is None or top_k > experts:
        return None
    return layers, top_k, experts


def _config_file(name_or_path: str) -> Path | None:
    """The ``config.json`` of a local model folder, or of a Hub id in the local Hugging Face cache."""
    if not name_or_path:
        return None
    folder = Path(os.path.expanduser(name_or_path))
    if folder.is_dir():
        return folder / "config.json" if (folder / "config.json").is_file() else None
    try:
        # Public in transformers.utils (huggingface_hub's, re-exported without __all__); offline, never downloads.
        from transformers.utils import try_to_load_from_cache  # type: ignore[attr-defined]

        cached = try_to_load_from_cache(name_or_path, "config.json")
    except Exception:  # not a valid repository id: nothing cached under that name
        return None
    return Path(cached) if isinstance(cached, str) else None


def _layout_at(name_or_path: str) -> tuple[tuple[int, int, int] | None, str]:
    """The layout the model's config gives, and what was found there (for the refusal's message)."""
    path = _config_file(name_or_path)
    if path is None:
        return None, f"{name_or_path!r} (no config.json here or in the Hugging Face cache)"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return None, f"{path} (unreadable: {e})"
    layout = layout_of_config(config) if isinstance(config, dict) else None
    if layout is None:
        return None, f"{path} (no num_hidden_layers, num_experts_per_tok and number of experts: not an MoE config)"
    return layout, str(path)


def _server_model_path(base_url: str) -> tuple[str | None, str]:
    """The model path the server reports, or why there is none."""
    reason = "no model_path"
    for route in _INFO_PATHS:
        try:
            reply = httpx.get(f"{base_url}{route}", timeout=_SERVER_TIMEOUT)
        except httpx.HTTPError as e:
            return None, f"{base_url} did not answer ({type(e).__name__})"
        if reply.status_code != 200:
            reason = f"GET {route}: HTTP {reply.status_code}"
            continue
        try:
            info = reply.json()
        except ValueError:
            continue
        path = info.get("model_path") if isinstance(info, dict) else None
        if isinstance(path, str) and path:
            return path, f"{base_url}{route}"
    return None, f"{base_url}: {reason}"


def find_layout(tokenizer: Any, base_url: str | None) -> tuple[int, int, int]:
    """The served model's routed-experts layout, from the tokenizer's folder, else from the server's model path.

    Raises:
        RoutedExpertsLayoutError: found in neither; one line saying where it looked and what to pass.
    """
    looked: list[str] = []
    name = getattr(tokenizer, "name_or_path", None)
    if isinstance(name, str) and name:
        layout, where = _layout_at(name)
        if layout is not None:
            return layout
        looked.append(f"the tokenizer's {where}")
    if base_url:
        model_path, where = _server_model_path(base_url)
        if model_path is not None and model_path != name:
            layout, where = _layout_at(model_path)
            if layout is not None:
                return layout
            looked.append(f"the server's model path {where}")
        elif model_path is None:
            looked.append(where)
    raise RoutedExpertsLayoutError(
        "return_routed_experts=True needs the served MoE model's routing layout and it was not found ("
        + "; ".join(looked or ["no tokenizer path and no server"])
        + "): pass routed_experts_layout=(num_hidden_layers, num_experts_per_tok, num_experts) from the model's "
        "config.json, or load the tokenizer from the model's folder"
    )
