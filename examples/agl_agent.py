"""A Strands agent that Agent Lightning's controller runs per rollout; its training data goes through strands-tito.

The agent code knows nothing about Agent Lightning or telemetry: an ordinary Strands agent with strands-tito's
SGLang model and a tool, plus a reward. Everything else comes from environment variables the controller passes
(docs/agent-lightning.md): the controller's own ``AGL_EVENT_URL``/``AGL_KEY`` name the rollout,
``STRANDS_TITO_CAPTURE=1`` and ``OTEL_EXPORTER_OTLP_ENDPOINT`` send each model call's exact tokens to a collector
started with ``--agl-url``/``--agl-key``, which posts them to the rollout as ``model_request`` events before this
process is allowed to exit.

The controller's local runner imports ``agl_agent:CalcAgent`` (with ``examples/`` on ``PYTHONPATH``) and calls
``CalcAgent().run()``; ``python examples/agl_agent.py`` does the same. Variables: ``SGLANG_URL`` (the policy
server), ``QUESTION`` and ``ANSWER`` (from the rollout's input through the rollout's ``env_map``), ``MODEL_ID``
(the served model's name, reported with each call).
"""

import os
import re
from decimal import Decimal

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager

from strands_tito import SGLangModel, record_reward
from strands_tito.testing.tokenizers import build_qwen3_tokenizer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def reward(answer: str, expected: str) -> float:
    """1.0 when the last number in ``answer`` equals ``expected`` as a number, else 0.0.

    Exact numeric comparison, not a substring test: "25 * 17 = 425." does not answer 42, and neither does "42 or 43".
    """
    numbers = re.findall(r"-?\d+(?:\.\d+)?", answer.replace(",", ""))
    return 1.0 if numbers and Decimal(numbers[-1]) == Decimal(expected) else 0.0


class CalcAgent:
    """One rollout: answer the question with the tool, then score the answer."""

    def run(self) -> None:
        model = SGLangModel(
            tokenizer=build_qwen3_tokenizer(),
            base_url=os.environ["SGLANG_URL"],
            model_id=os.environ.get("MODEL_ID", "sglang"),
        )
        agent = Agent(model=model, tools=[add], conversation_manager=NullConversationManager(), callback_handler=None)
        answer = str(agent(os.environ.get("QUESTION", "What is 25 + 17?") + " Use the add tool."))
        print(answer)
        # The last reward recorded for the trajectory is the rollout's reward (Agent Lightning's convention).
        record_reward(reward(answer, os.environ.get("ANSWER", "42")), agent=agent)
        # No flush and no Agent Lightning call: at exit the trajectory's end signal goes out, and the process
        # exits only once the collector has its events on the Agent Lightning server.


if __name__ == "__main__":
    CalcAgent().run()
