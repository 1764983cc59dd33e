"""The recomputation behind ``strands-tito verify``: a trainer's forward pass over recorded token ids.

Run as a script (``python verify_worker.py MODEL_DIR DEVICE DTYPE``) by any Python that has torch and transformers,
which need not have strands-tito installed: the project's own environment often has no torch (PyPI's default Linux
torch pulls gigabytes of CUDA packages), while a trainer's or vLLM's environment has one. It imports only the standard
library, torch and transformers.

Protocol, one JSON object a line: the worker first writes ``{"ready": {"vocab", "device", "dtype"}}`` (or
``{"error": "..."}`` and exits 1); then for each request ``{"ids": [...], "positions": [...]}`` on stdin it writes
``{"logprobs": [...]}``: for each position ``p`` (``1 <= p < len(ids)``) the log-probability the model gives
``ids[p]`` after ``ids[:p]``; for ``{"decode": [[ids], ...]}`` it writes ``{"texts": [...]}`` (the model directory's
tokenizer, special tokens kept).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Load the model, then answer requests until stdin closes."""
    model_dir, device_name, dtype_name = argv
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        missing = e.name or "torch/transformers"
        _reply({"error": f"{sys.executable} cannot import {missing}: give --python one with torch and transformers"})
        return 1
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device_name == "auto" else device_name
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, local_files_only=True)
        model = model.to(device)
    except (OSError, ValueError) as e:
        _reply({"error": f"cannot load the model from {model_dir}: {str(e).splitlines()[0]}"})
        return 1
    model.eval()
    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    except (OSError, ValueError):
        tokenizer = None  # texts are then the ids
    head = model.get_output_embeddings()
    vocab = int(head.weight.shape[0])
    _reply({"ready": {"vocab": vocab, "device": device, "dtype": dtype_name}})
    torch.set_grad_enabled(False)
    for line in sys.stdin:
        request = json.loads(line)
        if "decode" in request:
            pieces = request["decode"]
            texts = [tokenizer.decode(ids, skip_special_tokens=False) if tokenizer else str(ids) for ids in pieces]
            _reply({"texts": texts})
            continue
        ids, positions = request["ids"], request["positions"]
        tokens = torch.tensor([ids], device=device)
        where = torch.tensor(positions, dtype=torch.long, device=device)
        # Logits only where a compared token is predicted (the model's own head, soft-capping and all): a long
        # trajectory's full (length x vocabulary) logits need not fit in memory.
        logits = model(tokens, logits_to_keep=where - 1).logits[0].float()
        chosen = logits.gather(1, tokens[0, where].unsqueeze(1)).squeeze(1)
        logprobs = (chosen - torch.logsumexp(logits, dim=1)).tolist()
        _reply({"logprobs": logprobs})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
