"""Per-turn prompt encoding and tool-call parsing CPU per model family, at 1k and 32k tokens of context.

The continuation renders only a short stand-in tail (never the history), so its cost must not grow with the context.
Run: ``.venv/bin/python benchmarks/family_prompt_cost.py`` (needs the cached Qwen3 vocabulary and real templates).
"""

from __future__ import annotations

import time
from typing import Any

from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import PromptEncoder, PromptError
from strands_tito.providers.tool_parsers import TOOL_PARSERS, get_tool_parser
from strands_tito.testing.family_tokenizers import family_tokenizer

SPEC: Any = {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "inputSchema": {"json": {"type": "object", "properties": {"expression": {"type": "string"}}}},
}
REPEATS = 30


def context(tokenizer: Any, length: int) -> list[int]:
    """A trajectory of ``length`` tokens ending with the family's stop token."""
    filler = tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 8, add_special_tokens=False)
    ids = (filler * (length // len(filler) + 1))[: length - 1]
    return [*ids, tokenizer.convert_tokens_to_ids(tokenizer.eos_token)]


def per_turn_ms(encoder: PromptEncoder, ctx: list[int]) -> float:
    previous: Any = {
        "role": "assistant",
        "content": [
            {"text": "x"},
            {"toolUse": {"toolUseId": "functions.calculator:0", "name": "calculator", "input": {"expression": "1+1"}}},
        ],
    }
    result: Any = {
        "toolResult": {"toolUseId": "functions.calculator:0", "status": "success", "content": [{"text": "2"}]}
    }
    new: Any = [{"role": "user", "content": [result]}]
    start = time.process_time()
    for _ in range(REPEATS):
        encoder.continuation(new, previous, ctx)
    return (time.process_time() - start) / REPEATS * 1000


def parse_ms(name: str, text: str) -> float:
    parser = get_tool_parser(name)
    start = time.process_time()
    for _ in range(REPEATS):
        parser.parse(text, [SPEC])
    return (time.process_time() - start) / REPEATS * 1000


def main() -> None:
    print("| family | encode 1k ms | encode 32k ms | 32k/1k | parse (32k-char output) ms |")
    print("|---|---|---|---|---|")
    for name, spec in FAMILIES.items():
        tokenizer = family_tokenizer(name)
        try:
            encoder = PromptEncoder(tokenizer)
        except PromptError as e:
            print(f"| {name} | n/a: {str(e)[:60]} | | | |")
            continue
        small, large = per_turn_ms(encoder, context(tokenizer, 1024)), per_turn_ms(encoder, context(tokenizer, 32768))
        parsing = parse_ms(spec.parser, "word " * 6500 + "done") if spec.parser in TOOL_PARSERS else float("nan")
        print(f"| {name} | {small:.2f} | {large:.2f} | {large / small:.2f} | {parsing:.2f} |")


if __name__ == "__main__":
    main()
