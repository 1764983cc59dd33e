"""Reasoning in model output: split off so Strands gets it as reasoning content, never inside the answer text.

The trajectory keeps every generated token as it is; this only decides what the agent sees as text.
"""

from __future__ import annotations

__all__ = ["split_harmony", "split_reasoning"]


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


def split_harmony(text: str) -> tuple[str, str]:
    """Split gpt-oss (harmony) output into ``(reasoning, answer)``.

    The output is a sequence of messages ``HEADER<|message|>CONTENT`` ended by ``<|end|>``, ``<|call|>``,
    ``<|return|>`` or the end of the text (the first continues the generation prompt's ``<|start|>assistant``).
    ``analysis`` messages are the reasoning, ``final`` messages the answer; commentary messages to a recipient
    (``to=functions.N``) are calls and commentary without one (preambles) are answer text. Text without harmony
    markup is all answer.
    """
    if "<|message|>" not in text:
        return "", text
    reasoning: list[str] = []
    answer: list[str] = []
    for segment in text.split("<|start|>"):
        header, marked, content = segment.partition("<|message|>")
        if not marked:
            continue
        for end in ("<|end|>", "<|call|>", "<|return|>"):
            content = content.split(end, 1)[0]
        channel = header.split("<|channel|>", 1)[1] if "<|channel|>" in header else ""
        if channel.startswith("analysis"):
            reasoning.append(content)
        elif channel.startswith("final") or ("to=" not in header and channel.startswith("commentary")):
            answer.append(content)
    return "\n".join(reasoning), "\n".join(answer)
