"""Many concurrent Strands agents in one process, capture switched on by environment variables only.

    SGLANG_URL=... STRANDS_TITO_CAPTURE=1 OTEL_EXPORTER_OTLP_ENDPOINT=... python spool_load_agents.py N ROUNDS

Each agent (``SGLangModel`` with a tool) asks ROUNDS questions, one tool call each, and then resets its model, which
ends its trajectory (end signal ``reset``). Prints ``started`` once every agent is built, ``done`` at the end; the
exit flush (``STRANDS_TITO_FLUSH_TIMEOUT``) then delivers what is still waiting. Used by
tests/capture/test_spool_load.py.
"""

import asyncio
import os
import sys

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager

from strands_tito import SGLangClient, SGLangModel
from strands_tito.testing.tokenizers import build_qwen3_tokenizer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def main(agents: int, rounds: int) -> None:
    tokenizer = build_qwen3_tokenizer()
    client = SGLangClient(os.environ["SGLANG_URL"], max_connections=agents, backoff_base=0.05, backoff_max=0.5)

    def build(i: int) -> Agent:
        model = SGLangModel(tokenizer=tokenizer, client=client, sampling_params={"max_new_tokens": 64})
        return Agent(
            model=model,
            tools=[add],
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            system_prompt=f"You are agent number {i}.",
        )

    first = int(os.environ.get("AGENT_NUMBER_FROM", "0"))  # several processes: distinct prompts, distinct scripts
    built = [build(first + i) for i in range(agents)]
    print("started", flush=True)

    async def run(i: int, agent: Agent) -> None:
        for r in range(rounds):
            await agent.invoke_async(f"Agent {i}, round {r}: what is {i} + {r}? Use the add tool.")
        agent.model.reset()  # type: ignore[attr-defined]

    await asyncio.gather(*(run(first + i, a) for i, a in enumerate(built)))
    # How much went through the disk spool (the test checks the outage really exercised it).
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from strands_tito.capture.recorder import attached_processors

    provider = trace.get_tracer_provider()
    for processor in attached_processors(provider) if isinstance(provider, TracerProvider) else []:
        tito = getattr(processor, "tito", None)
        if tito is not None:
            print(f"spool spilled={tito.spilled} dropped={tito.dropped}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
