"""Reasoning in model output: split off so Strands gets it as reasoning content, never inside the answer text.

The trajectory keeps every generated token as it is; this only decides what the agent sees as text.
"""

from __future__ import annotations

__all__ = ["split_reasoning"]


def split_reasoning(text: str, start: str = "<think>", end: str = "</think>") -> tuple[str, str]:
    """Split output text into ``(reasoning, answer)``.

    ``<think>R</think>A`` and ``R</think>A`` (the generation prompt opened the block) give ``(R, A)`` with the
    newlines around the markup removed; an unclosed ``<think>R`` gives ``(R, text before it)``; text without the
    markup is all answer.
    """
    if end in text:
        head, answer = text.split(end, 1)
        before, opened, reasoning = head.partition(start)
        if not opened:
            before, reasoning = "", head
        return reasoning.strip("\n"), (before + answer.lstrip("\n"))
    before, opened, reasoning = text.partition(start)
    if opened:
        return reasoning.strip("\n"), before
    return "", text
