"""strands-env 0.7.3's per-tool metrics on strands-tito: a malformed call is counted under the tool the model named.

strands-env's ``Environment.compute_metrics`` reads Strands' per-tool metrics and ``model.tool_parse_errors`` by tool
name. On strands-sglang 0.6.2 a call with broken JSON gives ``calculator = {calls: 2, errors: 1, parse_errors: 1}``
(the malformed call and the good one); this runs strands-env's own ``Environment.rollout`` in its process (see
tests/test_strands_env.py for how that process is set up) against the local engine and checks the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from strands_tito.engine import LocalEngine, Reply, Script

from .test_strands_env import engine_for, strands_env, strands_env_sdist, tiktoken_cache  # noqa: F401 (fixtures)

ROLLOUT = """
import asyncio, json, sys
from strands import tool
from strands_env.core import Environment
from strands_env.core.models import ModelConfig, build_model_factory
from strands_env.core.types import Task


@tool
def calculator(expression: str) -> str:
    \"\"\"Add two numbers written as 'a + b'.

    Args:
        expression: The sum.
    \"\"\"
    a, b = expression.split("+")
    return str(int(a) + int(b))


class CalculatorEnv(Environment):
    def get_tools(self):
        return [calculator]


async def main():
    config = ModelConfig(base_url=sys.argv[1], tool_parser="hermes", sampling_params={"max_new_tokens": 256})
    result = await CalculatorEnv(model_factory=build_model_factory(config)).rollout(Task(message="1 + 1?"))
    print(json.dumps({"termination": result.termination_reason.value, "tools": result.metrics["per_tool_metrics"]}))


asyncio.run(main())
"""


def test_a_malformed_call_is_counted_under_its_tool(request: pytest.FixtureRequest) -> None:
    run_in_strands_env = request.getfixturevalue("strands_env")
    start: Callable[..., LocalEngine] = request.getfixturevalue("engine_for")
    broken = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 +"\n</tool_call>'
    good = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 1"}}\n</tool_call>'
    engine = start(Script(turns=[Reply(text=broken), Reply(text=good), Reply(text="2")]))
    done = run_in_strands_env("-c", ROLLOUT, engine.base_url)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["termination"] == "task_complete"
    calculator = summary["tools"]["calculator"]
    assert (calculator["calls"], calculator["errors"], calculator["parse_errors"]) == (2, 1, 1)
    assert calculator["is_known"] is True and set(summary["tools"]) == {"calculator"}
