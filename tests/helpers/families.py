"""The conversation every family plays in its tests: the plan of turns (thinking, tool calls, answers) and the
Strands messages it becomes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from strands_tito.providers.families import Family

from ..helpers.agents import SYSTEM, calculator
from ..helpers.templates import json_text_arguments

USER_1 = "What is 25 * 17?"


USER_2 = "Now compute 2 ** 10 and 3 * 3."


NO_THINK_AFTER_TOOLS = {"deepseek-v3.1"}


@dataclass
class Turn:
    """One assistant turn of the planned episode."""

    reasoning: str
    content: str = ""
    calls: tuple[dict[str, Any], ...] = ()


def plan(spec: Family, thinking: bool) -> list[Turn]:
    # The Llama-3.x templates allow one call per message; gpt-oss makes one call per turn (<|call|> is a stop token).
    parallel = spec.parser not in ("llama3_json", "gpt_oss")
    second = ({"expression": "2 ** 10"}, {"expression": "3 * 3"}) if parallel else ({"expression": "2 ** 10"},)
    answer = "1024 and 9." if parallel else "1024."
    think = (lambda text: text) if thinking else (lambda text: "")
    # DeepSeek-V3.1's generation prompt after tool results opens no think block: the model answers directly.
    after_tools = (lambda text: "") if spec.name in NO_THINK_AFTER_TOOLS else think
    return [
        Turn(think("I need the calculator."), calls=({"expression": "25 * 17"},)),
        Turn(after_tools("The tool said 425."), content="It is 425."),
        Turn(think("Two products now."), calls=second),
        Turn(after_tools("Both are known."), content=answer),
    ]


def results(calls: tuple[dict[str, Any], ...]) -> list[str]:
    return [str(calculator(**c)) for c in calls]


def structured(spec: Family, turns: list[Turn], ids: list[str] | None = None) -> list[list[dict[str, Any]]]:
    """The conversation as the template expects it, as the list of prompts before each assistant turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER_1}]
    prompts: list[list[dict[str, Any]]] = []
    index = 0
    for i, turn in enumerate(turns):
        prompts.append(list(messages))
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        calls = []
        for arguments in turn.calls:
            call_id = ids[index] if ids is not None else f"functions.calculator:{index}"
            # In the form the family's original takes them: JSON text for DeepSeek-V3.1, else a mapping.
            written = json.dumps(arguments) if json_text_arguments(spec.name) else arguments
            calls.append({"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": written}})
            index += 1
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
        for call, result in zip(calls, results(turn.calls), strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": result})
        if i == 1:
            messages.append({"role": "user", "content": USER_2})
    prompts.append(messages)
    return prompts
