"""Multi-agent lineage on the path users run: capture switched on by environment variables in a fresh process.

Each test runs one of the ordinary programs in ``lineage_programs.py`` in a subprocess that sets only the documented
variables (``STRANDS_TITO_CAPTURE=1`` and ``OTEL_EXPORTER_OTLP_ENDPOINT``), so capture installs its own tracer
provider with its default sampler; the spans go over OTLP/HTTP to a real ``strands-tito collect`` process, whose JSONL
records are checked: every record exact against what the local engine received and produced, and placed in its
episode (parent trajectory, graph or swarm node, invocation, purpose). No tracer provider of the test's is involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strands_tito.capture import recorder as capture
from strands_tito.testing.engine import LocalEngine, Reply, Script

from ..helpers.agents import hermes_call
from ..helpers.collector import start, stop
from ..helpers.otlp import read_jsonl

PROGRAM = Path(__file__).with_name("lineage_programs.py")
TIMEOUT = 120


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """One ``strands-tito collect`` process for the module: its OTLP/HTTP port and its JSONL output."""
    directory = tmp_path_factory.mktemp("collector")
    proc, port = start(directory)
    yield port, directory / "out.jsonl"
    stop(proc)


def run_program(engine: LocalEngine, collector: tuple[int, Path], shape: str, **env: str) -> list[dict[str, Any]]:
    """Run a program with only the documented variables set; return the collector's records of that process."""
    port, out = collector
    service = f"lineage-{shape}-{os.getpid()}-{id(engine)}"
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_")) and k != "PYTHONPATH"
    }
    variables = {
        capture.ENV_CAPTURE: "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": service,
        "SGLANG_URL": engine.base_url,
        **env,
    }
    done = subprocess.run(
        [sys.executable, str(PROGRAM), shape],
        env={**clean, **variables},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    expected = len({r.conversation for r in engine.records if r.path == "/generate"})
    for _ in range(300):
        mine = [r for r in read_jsonl(out) if r["resource"].get("service.name") == service]
        if len(mine) >= expected:
            return mine
        time.sleep(0.1)
    raise AssertionError(f"{len(mine)} of {expected} records arrived")


def assert_exact(records: list[dict[str, Any]], engine: LocalEngine) -> None:
    """Every record complete and equal, token for token, to one conversation the engine served, and each generated
    token loss-masked in exactly one record."""
    served: dict[int, list[Any]] = {}
    for r in engine.records:
        if r.path == "/generate" and r.status == 200 and r.output_ids is not None:
            served.setdefault(r.conversation, []).append(r)
    by_tokens = {tuple(rs[-1].input_ids + rs[-1].output_ids): rs for rs in served.values()}
    assert len(records) == len(served)
    for record in records:
        assert record["complete"] is True, record["reason"]
        calls = by_tokens.pop(tuple(record["token_ids"]))
        outputs = [i for i, masked in zip(record["token_ids"], record["loss_mask"], strict=True) if masked]
        assert outputs == [i for r in calls for i in r.output_ids]
    assert not by_tokens


def named(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(records, key=lambda r: r["invocation_index"]):
        found.setdefault(record["agent_name"], []).append(record)
    return found


def tree_scripts(shape: str) -> list[Script]:
    """orchestrator -> researcher -> fact_checker, orchestrator -> writer, as the shape's tools are called."""
    if shape.startswith("tools"):
        research, write, check = (
            hermes_call("researcher", input="What is 6*7?"),
            hermes_call("writer", input="Write: 6*7 = 42."),
            hermes_call("fact_checker", input="6*7 = 42?"),
        )
    else:
        research, write, check = (
            hermes_call("ask_researcher", question="What is 6*7?"),
            hermes_call("ask_writer", topic="6*7 = 42."),
            hermes_call("ask_fact_checker", claim="6*7 = 42?"),
        )
    return [
        Script(match="You are the orchestrator.", turns=[Reply(text=research), Reply(text=write), Reply(text="Done.")]),
        Script(match="You are the researcher.", turns=[Reply(text=check), Reply(text="6*7 = 42, checked.")]),
        Script(match="You are the fact_checker.", turns=[Reply(text="Correct.")]),
        Script(match="You are the writer.", turns=[Reply(text="Six times seven is 42.")]),
    ]


SHAPES = ["prebuilt-sync", "prebuilt-async", "inside-sync", "inside-async", "tools-sync", "tools-async"]


@pytest.mark.parametrize("shape", SHAPES)
def test_agents_as_tools_get_their_parent(
    shape: str, start_engine: Callable[..., LocalEngine], collector: tuple[int, Path]
) -> None:
    engine = start_engine(*tree_scripts(shape))
    records = run_program(engine, collector, shape)
    assert_exact(records, engine)
    agents = {name: found for name, [found] in named(records).items()}
    assert set(agents) == {"orchestrator", "researcher", "fact_checker", "writer"}
    tid = {name: record["trajectory_id"] for name, record in agents.items()}
    # The first agent of the process is the root; its direct sub-agents find it, and the researcher's its own.
    assert agents["orchestrator"]["parent_trajectory_id"] is None
    assert agents["researcher"]["parent_trajectory_id"] == tid["orchestrator"]
    assert agents["writer"]["parent_trajectory_id"] == tid["orchestrator"]
    assert agents["fact_checker"]["parent_trajectory_id"] == tid["researcher"]
    assert len({record["episode_id"] for record in records}) == 1
    assert all(record["node"] is None and record["purpose"] is None for record in records)


def test_graph_records_name_the_run_the_node_and_its_inputs(
    start_engine: Callable[..., LocalEngine], collector: tuple[int, Path]
) -> None:
    engine = start_engine(
        *(Script(match=f"You are the {name}.", turns=[Reply(text=f"{name}: 42.")]) for name in ("researcher",)),
        Script(match="You are the analyst_a.", turns=[Reply(text="analyst_a: 42.")]),
        Script(match="You are the analyst_b.", turns=[Reply(text="analyst_b: 42.")]),
        Script(match="You are the editor.", turns=[Reply(text="editor: 42.")]),
    )
    records = run_program(engine, collector, "graph")
    assert_exact(records, engine)
    nodes = {record["node"]["node_id"]: record["node"] for record in records}
    assert set(nodes) == {"research", "analysis_a", "analysis_b", "edit"}
    assert {node["kind"] for node in nodes.values()} == {"graph"}
    assert len({node["run_id"] for node in nodes.values()}) == 1
    assert nodes["research"]["inputs"] == []
    assert nodes["analysis_a"]["inputs"] == nodes["analysis_b"]["inputs"] == ["research"]
    assert sorted(nodes["edit"]["inputs"]) == ["analysis_a", "analysis_b"]
    assert nodes["research"]["step"] == 0 and nodes["edit"]["step"] == 3
    assert sorted(node["step"] for node in nodes.values()) == [0, 1, 2, 3]
    assert len({record["episode_id"] for record in records}) == 1
    assert all(record["parent_trajectory_id"] is None for record in records)


def test_swarm_records_give_the_handoff_order_and_distinct_invocations(
    start_engine: Callable[..., LocalEngine], collector: tuple[int, Path]
) -> None:
    engine = start_engine(
        Script(
            match="You are the planner.",
            turns=[
                Reply(text=hermes_call("handoff_to_agent", agent_name="solver", message="Compute 6*7.")),
                Reply(text="Handed to the solver."),
            ],
        ),
        Script(
            match="You are the solver.",
            turns=[
                Reply(text=hermes_call("handoff_to_agent", agent_name="planner", message="It is 42; wrap up.")),
                Reply(text="Handed back."),
            ],
        ),
        Script(match="You are the planner.", turns=[Reply(text="6*7 = 42.")]),
    )
    records = run_program(engine, collector, "swarm")
    assert_exact(records, engine)
    by_step = sorted(records, key=lambda r: r["node"]["step"])
    assert [(r["agent_name"], r["node"]["inputs"]) for r in by_step] == [
        ("planner", []),
        ("solver", ["planner"]),
        ("planner", ["solver"]),
    ]
    assert [r["node"]["step"] for r in by_step] == [0, 1, 2]
    assert len({r["node"]["run_id"] for r in records}) == 1 and {r["node"]["kind"] for r in records} == {"swarm"}
    assert [r["invocation_index"] for r in by_step] == [0, 0, 1]
    keys = {(r["episode_id"], r["agent_id"], r["invocation_index"], r["sample_index"]) for r in records}
    assert len(keys) == len(records) == 3


def test_the_summary_is_its_own_record_linked_to_its_agent(
    start_engine: Callable[..., LocalEngine], collector: tuple[int, Path]
) -> None:
    engine = start_engine(
        Script(
            match="You are the summarized.",
            turns=[
                Reply(text=hermes_call("add", a=25, b=17)),
                Reply(text=hermes_call("add", a=42, b=1)),
                Reply(text="25 + 17 + 1 = 43."),
            ],
        ),
        Script(match="You are a conversation summarizer.", turns=[Reply(text="The user added 25 and 17: 42.")]),
        Script(match="You are the summarized.", turns=[Reply(text="25 + 17 + 1 = 43.")]),
    )
    # The third turn's prompt (277 tokens) overflows: the manager summarizes (a 96-token prompt), the agent goes on.
    records = run_program(engine, collector, "summary", CONTEXT_WINDOW_LIMIT="270")
    assert_exact(records, engine)
    [summary] = [r for r in records if r["purpose"] == "summary"]
    agent = [r for r in records if r["purpose"] is None]
    assert sorted(r["sample_index"] for r in agent) == [0, 1]  # the summary rewrote the history: a new sample
    first = next(r for r in agent if r["sample_index"] == 0)
    assert summary["parent_trajectory_id"] == first["trajectory_id"]
    assert summary["episode_id"] == first["episode_id"]
    assert (summary["agent_name"], summary["agent_id"]) == ("summarized", "summarized-id")
    keys = {(r["episode_id"], r["agent_id"], r["invocation_index"], r["sample_index"]) for r in records}
    assert len(keys) == len(records)
