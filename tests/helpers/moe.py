"""A local MoE model folder: the ``config.json`` a served model's folder holds (Qwen3-MoE's keys), where SGLangModel
finds the routed-experts layout when it is not given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def moe_model_dir(path: Path, layout: tuple[int, int, int], tokenizer: Any = None) -> Path:
    """Write ``path/config.json`` for ``(num_hidden_layers, num_experts_per_tok, num_experts)``, and the tokenizer's
    files when given (a folder ``AutoTokenizer.from_pretrained`` reads, as a real checkpoint's); returns ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(path))
    layers, top_k, experts = layout
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_hidden_layers": layers,
        "num_experts_per_tok": top_k,
        "num_experts": experts,
        "hidden_size": 64,
    }
    (path / "config.json").write_text(json.dumps(config))
    return path
