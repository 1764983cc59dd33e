"""Ordinary multi-agent Strands programs with no telemetry code, run by the lineage tests in a fresh process.

    SGLANG_URL=... STRANDS_TITO_CAPTURE=jsonl:out.jsonl python lineage_programs.py SHAPE

Capture is switched on by the environment variables alone and installs its own tracer provider (its default sampler).
Shapes (tests/capture/test_lineage_env.py gives the engine the matching scripts):

- ``prebuilt-sync`` / ``prebuilt-async``: sub-agents built before the run, called from ``@tool`` functions (sync tools
  calling ``agent(...)``, async tools awaiting ``agent.invoke_async(...)``); the orchestrator is invoked the same way.
- ``inside-sync`` / ``inside-async``: each sub-agent built inside the tool that calls it (Strands' older guide).
- ``tools-sync`` / ``tools-async``: the sub-agents passed in ``tools=`` (Strands wraps them with ``as_tool()``).

  Each is the tree orchestrator -> researcher -> fact_checker, orchestrator -> writer.
- ``graph``: a ``GraphBuilder`` graph, research feeding two parallel analysts, both feeding an editor.
- ``swarm``: a ``Swarm`` of planner and solver: planner -> solver -> planner.
- ``summary``: one agent with a ``SummarizingConversationManager`` whose context window overflows once.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager, SummarizingConversationManager
from strands.multiagent import GraphBuilder, Swarm

from strands_tito import SGLangModel
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

TOKENIZER = build_qwen3_tokenizer()


def model(**config: Any) -> SGLangModel:
    return SGLangModel(
        tokenizer=TOKENIZER, base_url=os.environ["SGLANG_URL"], sampling_params={"max_new_tokens": 64}, **config
    )


def agent(name: str, tools: list[Any] | None = None, **kwargs: Any) -> Agent:
    kwargs.setdefault("conversation_manager", NullConversationManager())
    return Agent(
        model=kwargs.pop("model", None) or model(),
        name=name,
        agent_id=f"{name}-id",
        description=f"The {name}.",
        system_prompt=f"You are the {name}.",
        tools=tools or [],
        callback_handler=None,
        **kwargs,
    )


def run(top: Agent, prompt: str, asynchronous: bool) -> str:
    if asynchronous:
        return str(asyncio.run(top.invoke_async(prompt)))
    return str(top(prompt))


def prebuilt(asynchronous: bool) -> str:
    fact_checker = agent("fact_checker")
    if asynchronous:

        @tool
        async def ask_fact_checker(claim: str) -> str:
            """Ask the fact checker.

            Args:
                claim: The claim.
            """
            return str(await fact_checker.invoke_async(claim))

    else:

        @tool
        def ask_fact_checker(claim: str) -> str:
            """Ask the fact checker.

            Args:
                claim: The claim.
            """
            return str(fact_checker(claim))

    researcher, writer = agent("researcher", [ask_fact_checker]), agent("writer")
    if asynchronous:

        @tool
        async def ask_researcher(question: str) -> str:
            """Ask the researcher.

            Args:
                question: The question.
            """
            return str(await researcher.invoke_async(question))

        @tool
        async def ask_writer(topic: str) -> str:
            """Ask the writer.

            Args:
                topic: The topic.
            """
            return str(await writer.invoke_async(topic))

    else:

        @tool
        def ask_researcher(question: str) -> str:
            """Ask the researcher.

            Args:
                question: The question.
            """
            return str(researcher(question))

        @tool
        def ask_writer(topic: str) -> str:
            """Ask the writer.

            Args:
                topic: The topic.
            """
            return str(writer(topic))

    return run(agent("orchestrator", [ask_researcher, ask_writer]), "Research 6*7, then write it up.", asynchronous)


def inside(asynchronous: bool) -> str:
    if asynchronous:

        @tool
        async def ask_fact_checker(claim: str) -> str:
            """Ask the fact checker.

            Args:
                claim: The claim.
            """
            return str(await agent("fact_checker").invoke_async(claim))

        @tool
        async def ask_researcher(question: str) -> str:
            """Ask the researcher.

            Args:
                question: The question.
            """
            return str(await agent("researcher", [ask_fact_checker]).invoke_async(question))

        @tool
        async def ask_writer(topic: str) -> str:
            """Ask the writer.

            Args:
                topic: The topic.
            """
            return str(await agent("writer").invoke_async(topic))

    else:

        @tool
        def ask_fact_checker(claim: str) -> str:
            """Ask the fact checker.

            Args:
                claim: The claim.
            """
            return str(agent("fact_checker")(claim))

        @tool
        def ask_researcher(question: str) -> str:
            """Ask the researcher.

            Args:
                question: The question.
            """
            return str(agent("researcher", [ask_fact_checker])(question))

        @tool
        def ask_writer(topic: str) -> str:
            """Ask the writer.

            Args:
                topic: The topic.
            """
            return str(agent("writer")(topic))

    return run(agent("orchestrator", [ask_researcher, ask_writer]), "Research 6*7, then write it up.", asynchronous)


def as_tools(asynchronous: bool) -> str:
    researcher = agent("researcher", [agent("fact_checker")])
    orchestrator = agent("orchestrator", [researcher, agent("writer")])
    return run(orchestrator, "Research 6*7, then write it up.", asynchronous)


def graph() -> str:
    builder = GraphBuilder()
    builder.add_node(agent("researcher"), "research")
    builder.add_node(agent("analyst_a"), "analysis_a")
    builder.add_node(agent("analyst_b"), "analysis_b")
    builder.add_node(agent("editor"), "edit")
    builder.add_edge("research", "analysis_a")
    builder.add_edge("research", "analysis_b")
    builder.add_edge("analysis_a", "edit")
    builder.add_edge("analysis_b", "edit")
    builder.set_entry_point("research")
    result = builder.build()("What is 6*7?")
    return str(result.status)


def swarm() -> str:
    planner, solver = agent("planner"), agent("solver")
    result = Swarm([planner, solver], entry_point=planner)("What is 6*7?")
    return " ".join(node.node_id for node in result.node_history)


def summary() -> str:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    manager = SummarizingConversationManager(
        summary_ratio=0.5,
        preserve_recent_messages=2,
        summarization_system_prompt="You are a conversation summarizer. Be brief.",
    )
    limit = int(os.environ["CONTEXT_WINDOW_LIMIT"])
    summarized = agent("summarized", [add], conversation_manager=manager, model=model(context_window_limit=limit))
    return str(summarized("What is 25 + 17, and then plus 1? Use the add tool."))


SHAPES = {
    "prebuilt-sync": lambda: prebuilt(False),
    "prebuilt-async": lambda: prebuilt(True),
    "inside-sync": lambda: inside(False),
    "inside-async": lambda: inside(True),
    "tools-sync": lambda: as_tools(False),
    "tools-async": lambda: as_tools(True),
    "graph": graph,
    "swarm": swarm,
    "summary": summary,
}

if __name__ == "__main__":
    print(SHAPES[sys.argv[1]](), flush=True)
