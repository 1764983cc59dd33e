"""The main job on the embedded default: a Strands agent with a tool, run against the local engine.

It prints the captured trajectory, coloured by loss mask, and checks it token for token against what the engine
received and produced.
"""

from __future__ import annotations

import ast
import asyncio
import operator
import sys
from typing import Any

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager

from .engine import LocalEngine, Reply, Script
from .sglang import SGLangModel
from .tokenizers import build_qwen3_tokenizer
from .viewer import Decoder, render_text

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


DEMO_SCRIPT = Script(
    turns=[
        Reply(text='<tool_call>\n{"name": "calculator", "arguments": {"expression": "25 * 17"}}\n</tool_call>'),
        Reply(text="25 * 17 = 425."),
    ]
)


async def run_demo(prompt: str = "What is 25 * 17?") -> int:
    """Run the demo; returns a process exit code (0 when the capture matches the engine exactly)."""
    tokenizer = build_qwen3_tokenizer()
    with LocalEngine(tokenizer, scripts=[DEMO_SCRIPT]) as engine:
        model = SGLangModel(tokenizer=tokenizer, base_url=engine.base_url, sampling_params={"max_new_tokens": 512})
        agent = Agent(
            model=model,
            tools=[calculator],
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            system_prompt="You are a careful assistant. Use the calculator for arithmetic.",
        )
        result = await agent.invoke_async(prompt)
        await model.client.aclose()
        records = [r for r in engine.records if r.path == "/generate" and r.status == 200]

    trajectory = model.token_manager
    print(render_text(trajectory.to_dict(), Decoder(tokenizer), color=sys.stdout.isatty()))
    print(f"\nagent answer: {str(result).strip()}")
    last = records[-1]
    engine_view = (last.input_ids or []) + (last.output_ids or [])
    exact = engine_view == trajectory.token_ids
    print(
        f"{len(records)} /generate calls; trajectory of {len(trajectory)} tokens "
        f"{'equals' if exact else 'DIFFERS FROM'} what the engine received and produced"
    )
    return 0 if exact else 1


def main() -> int:
    """Entry point of ``strands-tito demo``."""
    return asyncio.run(run_demo())
