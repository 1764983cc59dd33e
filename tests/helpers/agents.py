"""Agents on the local engine: a fast-retry client, an ``SGLangModel``, a real Strands agent with real tools, the
engine's own record of what it received and produced, and the check that a trajectory equals it token for token."""

from __future__ import annotations

import ast
import asyncio
import json
import operator
from typing import Any

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager, SlidingWindowConversationManager
from transformers import PreTrainedTokenizerBase

from strands_tito import (
    SGLangClient,
    SGLangModel,
    TokenClient,
)
from strands_tito.testing.engine import EngineRecord, LocalEngine, Reply, Script
from strands_tito.trajectory import Trajectory

_OPS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_evaluate(node.operand)))
    raise ValueError(f"unsupported expression element: {ast.dump(node)}")


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / ** and parentheses.

    Args:
        expression: The expression, e.g. "25 * 17".
    """
    value = _evaluate(ast.parse(expression, mode="eval").body)
    return str(int(value)) if value.is_integer() else str(value)


def fast_client[C: TokenClient](engine: LocalEngine, client_type: type[C] = SGLangClient, **kwargs: Any) -> C:
    """A client (SGLang's unless ``client_type`` says) with short backoff so retry tests take milliseconds."""
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    kwargs.setdefault("max_retries", 3)
    return client_type(engine.base_url, **kwargs)


def make_model(engine: LocalEngine, tokenizer: PreTrainedTokenizerBase, **config: Any) -> SGLangModel:
    """An SGLangModel on the engine with a fast-retry client."""
    client_kwargs = config.pop("client_kwargs", {})
    config.setdefault("sampling_params", {"max_new_tokens": 256})
    return SGLangModel(client=fast_client(engine, **client_kwargs), tokenizer=tokenizer, **config)


def make_agent(model: SGLangModel, tools: list[Any] | None = None, **kwargs: Any) -> Agent:
    """A real Strands agent with an append-only history and no Strands-level retries."""
    kwargs.setdefault("system_prompt", "You are a helpful assistant.")
    return Agent(
        model=model,
        tools=tools or [],
        callback_handler=None,
        conversation_manager=NullConversationManager(),
        retry_strategy=None,
        **kwargs,
    )


def generate_records(engine: LocalEngine, conversation: int | None = None) -> list[EngineRecord]:
    """Successful /generate records, optionally of one engine conversation."""
    return [
        r
        for r in engine.records
        if r.path == "/generate"
        and r.status == 200
        and r.output_ids is not None
        and r.fault is None
        and (conversation is None or r.conversation == conversation)
    ]


def assert_matches_engine(trajectory: Trajectory, records: list[EngineRecord]) -> None:
    """The central assertion: the trajectory is exactly what the engine received and produced, call by call."""
    assert len(records) == len(trajectory.turns) > 0
    for turn, record in zip(trajectory.turns, records, strict=True):
        assert record.input_ids == trajectory.token_ids[: turn.output_start], f"turn {turn.index}: prompt differs"
        end = turn.output_start + turn.output_length
        assert record.output_ids == trajectory.token_ids[turn.output_start : end], f"turn {turn.index}: output differs"
        assert record.output_logprobs == trajectory.logprobs[turn.output_start : end]
        assert all(trajectory.loss_mask[turn.output_start : end])
        assert not any(trajectory.loss_mask[turn.prompt_start : turn.output_start])
    last = records[-1]
    assert (last.input_ids or []) + (last.output_ids or []) == trajectory.token_ids


#: The calculator tool as an OpenAI-style ``tools`` entry (chat requests, ``apply_chat_template``).
CALCULATOR_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
IM_END = 151645


def hermes_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@tool
async def slow_echo(text: str, delay: float) -> str:
    """Echo text after a delay.

    Args:
        text: What to echo.
        delay: Seconds to wait.
    """
    await asyncio.sleep(delay)
    return f"echo:{text}"


def decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))


# Output token sequences that decode-then-encode would change (each case checked against the real Qwen3 vocabulary).
DRIFT_CASES = {
    "tool_call_tag_in_pieces": [27, 14172, 13429, 29],  # "<tool_call>" spelled as plain text pieces
    "double_newline_split": [198, 198],  # "\n" "\n" instead of "\n\n"
    "broken_utf8": [124026, 5394],  # first byte of a 4-byte character, then " ok"
    "non_canonical_merge": [32713, 385],  # "Hel" "lo" instead of "Hello"
}


SYSTEM = "You are a helpful assistant."


def stepping_engine(start_engine: Any, qwen3: PreTrainedTokenizerBase, steps: int, *scripts: Script) -> LocalEngine:
    """An engine whose model calls ``step`` until the tool has run ``steps`` times, then answers."""
    call = f"<tool_call>\n{json.dumps({'name': 'step', 'arguments': {}})}\n</tool_call>"
    engine: LocalEngine = start_engine(*scripts, default=Reply(text=call))
    count = 0

    @tool
    def step() -> str:
        """Take one step of the task."""
        nonlocal count
        count += 1
        if count == steps:
            engine.core.default = Reply(text="Done.")
        return f"step {count} done: " + "details " * 6

    engine.step_tool = step  # type: ignore[attr-defined]
    return engine


def sliding_window_agent(model: Any, engine: LocalEngine, system_prompt: str | None = SYSTEM) -> Agent:
    """An agent on ``stepping_engine``'s ``step`` tool whose window (6 messages, 3 removed at a time) moves every third
    call: Strands rewrites the history the model saw, so each move starts a new sample."""
    return Agent(
        model=model,
        tools=[engine.step_tool],  # type: ignore[attr-defined]
        system_prompt=system_prompt,
        callback_handler=None,
        conversation_manager=SlidingWindowConversationManager(window_size=6, per_turn=3),
        retry_strategy=None,
    )
