"""A user's tool environment on strands-env 0.7.3, run by tests/compat/test_strands_env.py in a strands-env process.

``python tool_env_episodes.py BASE_URL``: three episodes of a strands-env ``Environment`` with one calculator tool,
built the way strands-env builds its SGLang models (``build_model_factory``), against the engine at ``BASE_URL``:
a tool call then an answer, a malformed call then a good one, and a tool loop stopped by ``max_tool_iters=1``. Prints
one JSON line per episode: termination reason, final response and per-tool metrics.
"""

from __future__ import annotations

import asyncio
import json
import sys

from strands import tool
from strands_env.core import Environment, Task
from strands_env.core.models import ModelConfig, build_model_factory


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression of integers, + - * and parentheses."""
    if not set(expression) <= set("0123456789+-*() "):
        raise ValueError(f"not an arithmetic expression: {expression!r}")
    return str(eval(expression, {"__builtins__": {}}))


class CalculatorEnv(Environment):
    def get_tools(self) -> list:  # type: ignore[type-arg]
        return [calculator]


async def main(base_url: str) -> None:
    sampling = {"max_new_tokens": 256}
    factory = build_model_factory(ModelConfig(backend="sglang", base_url=base_url, sampling_params=sampling))
    episodes = [
        (CalculatorEnv(model_factory=factory), "Chain: what is 6*7?"),
        (CalculatorEnv(model_factory=factory), "Malformed: what is 2+3?"),
        (CalculatorEnv(model_factory=factory, max_tool_iters=1), "Limit: keep calculating."),
    ]
    for env, message in episodes:
        result = await env.rollout(Task(message=message))
        print(
            json.dumps(
                {
                    "task": message,
                    "termination": result.termination_reason.value,
                    "final_response": result.final_response,
                    "tools": result.metrics["per_tool_metrics"],
                    "tokens": len(result.rollout.token_ids) if result.rollout is not None else None,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
