"""docs/agent-lightning.md's recipe runs as written, and its example reward cannot pass on a wrong answer.

The commands are read from the doc itself, so the two cannot drift apart. Each runs as a user's shell would run it
(``bash -c``), from the root of the checkout, in an environment that has none of this test run's variables: the
install line into a fresh virtual environment (offline: ``--no-index --no-build-isolation``, its dependencies from
this environment, as in ``tests/cli/test_wheel.py``), ``export`` as the shell does, the lines ending in ``&`` as
background processes (each awaited until it listens), then the ``curl`` calls. What changes: the ports (free ones
instead of 8080, 4318 and 30001), the output folder (``agl-run`` in a temporary folder) and ``--record`` on the
engine, so that the test can compare the rollout's events with what the engine received and produced. Agent
Lightning's own server and controller run for real.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..helpers.collector import free_port
from ..helpers.wheels import venv_seeing_these_packages

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "agent-lightning.md"
#: The doc's ports, each replaced by a free one: Agent Lightning's server, the collector (OTLP/HTTP), the engine.
PORTS = ("8080", "4318", "30001")
#: The background commands that listen, and on which of the doc's ports (the controller listens on nothing).
LISTENS = {"agl-server ": "8080", "strands-tito collect ": "4318", "strands-tito engine ": "30001"}


def recipe() -> list[str]:
    """The recipe's commands, one per line, as the doc writes them."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## The recipe")
    section = text[start : text.index("\n## ", start + 1)]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_the_example_reward_compares_numbers_exactly() -> None:
    """What the quick start's engine answers (425), a substring of it, or two numbers never pass for 42."""
    reward: Callable[[str, str], float] = runpy.run_path(str(ROOT / "examples" / "agl_agent.py"))["reward"]
    assert reward("25 + 17 = 42.", "42") == 1.0
    assert reward("The sum is 42.0", "42") == 1.0
    assert reward("25 * 17 = 425.", "42") == 0.0
    assert reward("It is 42 or 43.", "42") == 0.0
    assert reward("25 + 17 = 42.", "43") == 0.0
    assert reward("I cannot say.", "42") == 0.0


def _wait_until_listening(port: int, process: subprocess.Popen[str], log: Path, timeout: float = 120) -> bool:
    """Whether ``process`` listens on ``port`` within ``timeout``; False if it ended because the port was taken
    (another program on this machine got it since it was picked)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = log.read_text()
            assert "address already in use" in output, output[-3000:]
            return False
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} after {timeout}s: {log.read_text()[-3000:]}")


class Shell:
    """Runs recipe lines as a user's shell does; background lines keep running until :meth:`stop`."""

    def __init__(self, env: dict[str, str], directory: Path) -> None:
        self.env = env
        self.directory = directory
        self.background: list[tuple[subprocess.Popen[str], Path]] = []

    def run(self, line: str, timeout: float = 600) -> str:
        if match := re.fullmatch(r"export (\w+)=(\S+)(?:\s+#.*)?", line):
            self.env[match.group(1)] = match.group(2)
            return ""
        done = subprocess.run(
            ["bash", "-c", line], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def start(self, line: str, port: int | None) -> bool:
        """Start a background line; whether it is running (listening on ``port``, where it has one)."""
        log = self.directory / f"background-{len(self.background)}.log"
        process = subprocess.Popen(
            ["bash", "-c", line.rstrip().removesuffix("&")],
            cwd=ROOT,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group: stopped with everything it started
        )
        self.background.append((process, log))
        return port is None or _wait_until_listening(port, process, log)

    def stop(self) -> None:
        for process, _ in reversed(self.background):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in self.background:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_", "VIRTUAL_ENV")) and k != "PYTHONPATH"
    }
    # The install line's environment comes first on PATH; Agent Lightning's commands (a dependency, so installed
    # in this environment only) after it.
    path = os.pathsep.join([str(tmp_path / "venv" / "bin"), str(Path(sys.executable).parent), clean["PATH"]])
    running = Shell({**clean, "PATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _triplets(shell: Shell, line: str, rollout_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = json.loads(shell.run(line.replace("calc-1", rollout_id)))
    return events


def _start_in_background(shell: Shell, written: str, ports: dict[str, str], adapted: Callable[[str], str]) -> None:
    """Start a recipe line that ends in ``&``. The port it listens on is picked just before: a free port does not
    stay free for long on a machine where others run tests too; taken in between, the line runs again on another."""
    listens = next((doc for start, doc in LISTENS.items() if written.startswith(start)), None)
    for _ in range(5):
        if listens is not None:
            ports[listens] = str(free_port())
        if shell.start(adapted(written), None if listens is None else int(ports[listens])):
            return
    raise AssertionError(f"no free port for {written}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_recipe_runs_as_written(shell: Shell, tmp_path: Path) -> None:
    lines = recipe()
    ports: dict[str, str] = {}
    output = tmp_path / "agl-run"
    record = tmp_path / "engine.jsonl"

    def adapted(line: str) -> str:
        assert all(port in ports for port in PORTS if re.search(rf"[:= ]{port}\b", line)), line
        for port, free in ports.items():
            line = re.sub(rf"(?<=[:= ]){port}\b", free, line)
        return line.replace("agl-run/", f"{output}/")

    install, *rest = lines
    assert install.startswith("pip install ./core ./exporters ./collector ") and "agentlightning" in install
    assert not any("pip install 'strands-tito" in line for line in lines)  # not on PyPI
    venv_seeing_these_packages(tmp_path / "venv")
    shell.run(install.replace("pip install ", "python -m pip install --no-index --no-build-isolation -q ", 1))
    installed = subprocess.run(
        ["bash", "-c", "command -v strands-tito"], env=shell.env, capture_output=True, text=True, check=True
    )
    assert installed.stdout.strip() == str(tmp_path / "venv" / "bin" / "strands-tito")

    submit, status, view = rest[-3:]
    for written in rest[:-3]:
        if written.startswith("strands-tito engine "):
            assert "--port 30000" not in written  # never the quick start's engine
            written = written.replace(" &", f" --record {record} &")
        if not written.rstrip().endswith("&"):
            shell.run(adapted(written))
            continue
        _start_in_background(shell, written, ports, adapted)
    assert "AGL_KEY" in shell.env

    # Submit the doc's rollout, then one whose right answer, 4, is only a substring of what the engine's script
    # answers to both ("25 + 17 = 42."): a substring test would score it 1.0.
    assert "POST" in submit and "/api/rollouts" in submit
    created = json.loads(shell.run(adapted(submit)))
    assert [(r["rollout_id"], r["status"]["state"]) for r in created] == [("calc-1", "queuing")]
    other = adapted(submit).replace('"calc-1"', '"calc-2"').replace("25 + 17", "2 + 2").replace('"42"', '"4"')
    assert json.loads(shell.run(other))[0]["input"] == {"question": "What is 2 + 2?", "answer": "4"}

    def state(rollout_id: str) -> str:
        result: str = json.loads(shell.run(adapted(status).replace("calc-1", rollout_id)))["rollout"]["status"]["state"]
        return result

    deadline = time.monotonic() + 180
    while {state("calc-1"), state("calc-2")} - {"succeeded", "failed"} and time.monotonic() < deadline:
        time.sleep(0.5)
    logs = "\n".join(log.read_text()[-2000:] for _, log in shell.background)
    assert (state("calc-1"), state("calc-2")) == ("succeeded", "succeeded"), logs

    engine = [json.loads(r) for r in record.read_text().splitlines()]
    calls = [r for r in engine if r["path"] == "/generate" and r["status"] == 200]
    for rollout_id, expected_reward in (("calc-1", 1.0), ("calc-2", 0.0)):
        events = _triplets(shell, adapted(view), rollout_id)
        assert [e["event_type"] for e in events] == ["model_request", "model_request", "reward"], events
        assert events[-1]["data"]["value"] == expected_reward
        # Exact: each model_request is one /generate call of this rollout's conversation, token for token.
        first_prompt = events[0]["data"]["prompt_token_ids"]
        (conversation,) = {c["conversation"] for c in calls if c["input_ids"] == first_prompt}
        mine = [c for c in calls if c["conversation"] == conversation]
        assert [e["data"]["prompt_token_ids"] for e in events[:2]] == [c["input_ids"] for c in mine]
        assert [e["data"]["response_token_ids"] for e in events[:2]] == [c["output_ids"] for c in mine]
    # The collector also wrote both trajectories, complete.
    written = [json.loads(line) for line in (output / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["resource"]["agentlightning.rollout_id"] for r in written if r["complete"]) == ["calc-1", "calc-2"]
