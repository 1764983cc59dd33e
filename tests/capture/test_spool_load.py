"""Load: 200 concurrent agents in one process while the collector is paused for 10 s, or killed with ``kill -9`` and
restarted on the same store: every trajectory comes out exactly once, complete and token-exact.

All real processes on 127.0.0.1: a real ``strands-tito collect`` (SIGSTOP/SIGCONT, SIGKILL), one agent process with
200 real Strands agents on ``SGLangModel`` switched on by ``STRANDS_TITO_CAPTURE=1`` alone, the local engine in
this process. "Exact": each record's token ids are what the engine received and produced for that agent.

``STRANDS_TITO_LOAD_WITHOUT_SPOOL=1`` runs the same test with the SDK's plain ``BatchSpanProcessor`` (queue 256)
instead of the spool: it then fails (trajectories missing or incomplete), which shows the test can see the loss.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strands_tito.testing.engine import LocalEngine, Reply, Script

from ..helpers.agents import generate_records, hermes_call
from ..helpers.collector import CollectorProcess, free_port, read_records

ROOT = Path(__file__).resolve().parents[2]
AGENTS = 200
ROUNDS = 2
PAUSE = 10.0


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[CollectorProcess]:
    c = CollectorProcess(tmp_path / "store", tmp_path / "trajectories.jsonl", port=free_port())
    c.start()
    yield c
    c.stop()


def start_agents(
    engine: LocalEngine, collector: CollectorProcess, spool_dir: Path, stderr: Path
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_"))}
    env.update(
        {
            "SGLANG_URL": engine.base_url,
            "STRANDS_TITO_CAPTURE": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",  # a paused collector fails an export after 2 s: the spool takes over
            "OTEL_SERVICE_NAME": "load-agents",
            "STRANDS_TITO_SPOOL_DIR": str(spool_dir),
            "STRANDS_TITO_SPOOL_QUEUE_SPANS": "64",  # a small memory queue: the disk spool does the work
            "STRANDS_TITO_FLUSH_TIMEOUT": "90",
        }
    )
    if os.environ.get("STRANDS_TITO_LOAD_WITHOUT_SPOOL"):
        env.update(
            {"STRANDS_TITO_SPOOL": "0", "OTEL_BSP_MAX_QUEUE_SIZE": "256", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "128"}
        )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "capture" / "spool_load_agents.py"), str(AGENTS), str(ROUNDS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr.open("w"),  # a file, not a pipe: exporter warnings during the outage must never block it
        text=True,
        cwd=ROOT,
    )


def wait_for(proc: subprocess.Popen[str], word: str, timeout: float) -> list[str]:
    """Lines the process printed up to ``word``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line.strip())
        if line.strip() == word:
            return seen
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"agents never printed {word!r}")


def assert_exact(records: list[dict[str, Any]], engine: LocalEngine) -> None:
    """One complete record per agent, each equal token for token to its engine conversation."""
    problems = [(r["trajectory_id"], r["reason"]) for r in records if not r["complete"]]
    assert not problems, f"{len(problems)} incomplete: {problems[:5]}"
    ids = [r["trajectory_id"] for r in records]
    assert len(ids) == len(set(ids)), "a trajectory was written twice"
    conversations = {r.conversation for r in generate_records(engine)}
    assert len(records) == len(conversations) == AGENTS, (len(records), len(conversations))
    by_tokens = {tuple(r["token_ids"]): r for r in records}
    for conversation in conversations:
        calls = generate_records(engine, conversation)
        assert len(calls) == 2 * ROUNDS
        final = tuple((calls[-1].input_ids or []) + (calls[-1].output_ids or []))
        record = by_tokens.pop(final)  # KeyError: no record holds this agent's trajectory
        tokens, mask = record["token_ids"], record["loss_mask"]
        for call in calls:
            prompt = call.input_ids or []
            assert tokens[: len(prompt)] == prompt
            assert tokens[len(prompt) : len(prompt) + len(call.output_ids or [])] == call.output_ids
        assert [t for t, m in zip(tokens, mask, strict=True) if m] == [i for c in calls for i in c.output_ids or []]


@pytest.fixture
def load_engine(start_engine: Callable[..., LocalEngine]) -> LocalEngine:
    # Each agent: ROUNDS x (a tool call, then the answer), slow enough that the run outlasts the collector's outage.
    turns = [Reply(text=hermes_call("add", a=1, b=2), delay=0.5), Reply(text="It is 3.", delay=0.5)] * ROUNDS
    return start_engine(*[Script(turns=list(turns)) for _ in range(AGENTS)])


@pytest.mark.slow
@pytest.mark.parametrize("outage", ["pause", "kill"])
def test_200_agents_survive_a_collector_outage(
    outage: str, load_engine: LocalEngine, collector: CollectorProcess, tmp_path: Path
) -> None:
    log = tmp_path / "agents.stderr"
    agents = start_agents(load_engine, collector, tmp_path / "spool", log)
    try:
        wait_for(agents, "started", 120)
        time.sleep(1.0)  # the first turns are out
        if outage == "pause":
            collector.signal(signal.SIGSTOP)
            time.sleep(PAUSE)
            collector.signal(signal.SIGCONT)
        else:
            collector.signal(signal.SIGKILL)
            time.sleep(3.0)
            collector.start()  # same store, same port
        printed = wait_for(agents, "done", 180)
        agents.wait(120)
        stderr = log.read_text()
        assert agents.returncode == 0, stderr[-3000:]
        assert "strands-tito: dropped" not in stderr, stderr[-3000:]
    finally:
        if agents.poll() is None:
            agents.kill()
    if not os.environ.get("STRANDS_TITO_LOAD_WITHOUT_SPOOL"):
        [stats] = [line for line in printed if line.startswith("spool ")]
        spilled = int(re.search(r"spilled=(\d+)", stats).group(1))  # type: ignore[union-attr]
        assert spilled > 0, "the outage never sent a span to the disk spool"
    records = read_records(collector.out, AGENTS, 60)
    assert_exact(records, load_engine)
    assert not list((tmp_path / "spool").glob("*/*/seg-*")), "spans left in the spool"
