"""Agent Lightning: trajectories reach its trainer exactly, and before the agent process has exited.

Everything runs for real on 127.0.0.1: Agent Lightning's own server (``agl-server``, started here with a key) and, in
one test, its controller; strands-tito's collector (a ``strands-tito collect --agl-url --agl-key`` process, or the
same service in process where a test needs to look inside); example agents as subprocesses with only the
controller's environment variables plus ``STRANDS_TITO_CAPTURE=1`` and ``OTEL_EXPORTER_OTLP_ENDPOINT``, against the
local engine. What the trainer gets is read the way it reads it, by Agent Lightning's own trainer code
(``AglRolloutManagerBase._build_completed_rollout``: the triplet view plus the last reward), and merged with its
trajectory-level rule (transcribed below from ``RolloutAdapter.get_train_data_batch``, which needs torch and verl).

Between the collector and the server sits :class:`Proxy`, a plain HTTP forwarder that can slow answers down, go
down, count requests and hold one request open, so the tests can make delivery slow (the acknowledgement has to
wait for it), impossible for a while (events wait in the store), or cut short by ``kill -9`` at the worst moment
(an event that reached the server but whose answer never came back).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import grpc
import httpx
import numpy as np
import pytest
from agentlightning.verl.agl_rollout_manager import AglRolloutManagerBase, CompletedRollout, EnqueuedRollout
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito.capture import recorder as capture
from strands_tito.collector import Collector, CollectorConfig
from strands_tito.exporters import JsonlExporter
from strands_tito.exporters.agentlightning import MARKER, AgentLightningExporter, build_events
from strands_tito.testing.engine import LocalEngine, Reply, Script, routed_experts_for
from strands_tito.trajectory import Trajectory

from ..helpers.agents import calculator, generate_records, hermes_call, make_agent, make_model
from ..helpers.agl_trainer import train_batch
from ..helpers.collector import PB, CollectorProcess, free_port
from ..helpers.moe import moe_model_dir
from ..helpers.otlp import all_spans, make_request, random_trajectory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
KEY = "agl-test-key-7d41"


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# -- Agent Lightning's server ----------------------------------------------------------------------------------------


class AglServer:
    """``agl-server`` (key-protected, state in memory) and the REST calls the tests make as the trainer would."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "agl-server.log"
        self.proc = subprocess.Popen(
            [
                str(BIN / "agl-server"),
                "host=127.0.0.1",
                f"port={self.port}",
                f"key={KEY}",
                f"hydra.run.dir={directory / 'hydra'}",
                "hydra.output_subdir=null",
            ],
            cwd=directory,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)

        def healthy() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 60, "agl-server to start", 0.1)

    def create(self, rollout_id: str, *, running: bool = True, **body: Any) -> None:
        """Create a rollout (and mark it running on attempt 0, as the controller does when it starts the agent)."""
        r = self.http.post("/api/rollouts", json=[{"rollout_id": rollout_id, "input": {}, **body}])
        assert r.status_code == 201, r.text
        if running:
            r = self.http.patch(
                f"/api/rollouts/{rollout_id}", json={"status": {"state": "running", "last_attempt_id": "0"}}
            )
            assert r.status_code == 200, r.text

    def events(self, rollout_id: str, *, triplet: bool = False) -> list[dict[str, Any]]:
        r = self.http.get(f"/api/rollouts/{rollout_id}/events", params={"format": "triplet"} if triplet else {})
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()
        return events

    def state(self, rollout_id: str) -> str:
        state: str = self.http.get(f"/api/rollouts/{rollout_id}").json()["rollout"]["status"]["state"]
        return state

    def event_url(self, rollout_id: str) -> str:
        return f"{self.url}/api/rollouts/{rollout_id}/attempt/0/events"

    def close(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def agl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AglServer]:
    server = AglServer(tmp_path_factory.mktemp("agl"))
    yield server
    server.close()


def trainer_reads(agl: AglServer, rollout_id: str) -> CompletedRollout:
    """What Agent Lightning's trainer builds for a terminal rollout: triplets in order, the last reward on the last."""
    manager = AglRolloutManagerBase(agl_base_url=agl.url, agl_key=KEY, model="policy", step=0)
    try:
        rollout = manager._get_rollout(rollout_id)
        enqueued = EnqueuedRollout(
            data_id=rollout_id, rollout_id=rollout_id, step=0, sample_idx_in_step=0, enqueue_time=time.time()
        )
        return manager._build_completed_rollout(enqueued, rollout)
    finally:
        manager.client.close()


def merge(completed: CompletedRollout) -> list[dict[str, Any]]:
    """The trainer's trajectory-level merge of one rollout's triplets into training rows (no padding, no truncation).

    Transcribed from ``agentlightning/verl/rollout_adapter.py`` (``RolloutAdapter.get_train_data_batch``, level
    ``trajectory``, agentlightning 1.0.2): a triplet whose prompt starts with the current row's prompt + response is
    appended (the new prompt tokens masked 0 with logprob 0.0, its response masked 1); any other starts a new row.
    """
    triplets = completed.triplets or []
    assert triplets, "no triplets"
    rows: list[dict[str, Any]] = []
    first = triplets[0]
    prompt, response = list(first.prompt["token_ids"]), list(first.response["token_ids"])
    context, mask = prompt + response, [1] * len(response)
    logp = None if first.response["log_probs"] is None else list(first.response["log_probs"])
    for triplet in triplets[1:]:
        p, r, lp = list(triplet.prompt["token_ids"]), list(triplet.response["token_ids"]), triplet.response["log_probs"]
        if p[: len(context)] == context:
            observation = p[len(context) :]
            response += observation
            mask += [0] * len(observation)
            if logp is not None:
                logp += [0.0] * len(observation)
            response += r
            mask += [1] * len(r)
            logp = None if logp is None or lp is None or len(lp) != len(r) else logp + list(lp)
            context = p + r
            continue
        rows.append({"prompt": prompt, "response": response, "mask": mask, "logp": logp})
        context, prompt, response, mask = p + r, p, r, [1] * len(r)
        logp = None if lp is None else list(lp)
    rows.append({"prompt": prompt, "response": response, "mask": mask, "logp": logp})
    return rows


def assert_row_is_trajectory(
    row: dict[str, Any], token_ids: list[int], loss_mask: list[int], logprobs: list[Any]
) -> None:
    """One training row holds exactly the captured trajectory: tokens, loss mask, and the outputs' logprobs."""
    assert row["prompt"] + row["response"] == token_ids
    assert [0] * len(row["prompt"]) + row["mask"] == loss_mask
    n = len(row["prompt"])
    assert row["logp"] is not None
    expected = [lp if masked else 0.0 for lp, masked in zip(logprobs[n:], loss_mask[n:], strict=True)]
    assert np.array_equal(np.float32(row["logp"]), np.float32(expected))


def assert_delivered_once(raw: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Every event strands-tito posted is on the server exactly once, in order; returns event indices by trajectory."""
    seen: dict[str, list[int]] = {}
    for event in raw:
        marker = event["data"].get(MARKER)
        if marker is not None:
            seen.setdefault(marker["trajectory_id"], []).append(marker["event"])
            total = marker["events"]
    for indices in seen.values():
        assert indices == list(range(total)), f"events posted twice, missing or out of order: {indices}"
    return seen


# -- a proxy between the collector and the server --------------------------------------------------------------------


class Proxy:
    """Forwards HTTP to the Agent Lightning server; can answer late, be down, and hold one event POST unanswered."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.delay = 0.0
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) answered or forwarded
        self.hold_at: int | None = None  # hold the n-th event POST (1-based) ...
        self.hold_forwards = True  # ... after forwarding it to the server (True) or without (False)
        self.holding = threading.Event()
        self.release = threading.Event()
        self.client = httpx.Client(timeout=30)
        self._server: ThreadingHTTPServer | None = None
        self.up()

    def event_posts(self) -> int:
        return sum(1 for method, path, _ in self.requests if method == "POST" and path.endswith("/events"))

    def up(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                is_event_post = self.command == "POST" and self.path.endswith("/events")
                hold = is_event_post and proxy.hold_at is not None and proxy.event_posts() + 1 == proxy.hold_at
                status = 0
                if not hold or proxy.hold_forwards:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                    answer = proxy.client.request(self.command, proxy.target + self.path, content=body, headers=headers)
                    status = answer.status_code
                proxy.requests.append((self.command, self.path.split("?")[0], status))
                if hold:
                    proxy.holding.set()
                    proxy.release.wait(60)
                    self.close_connection = True
                    return  # never answered: the sender cannot know whether the event was stored
                time.sleep(proxy.delay)
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = do_POST = do_PATCH = _forward

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)  # HTTP/1.0: one request per connection
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server

    def down(self) -> None:
        """Stop listening: connections are refused until :meth:`up`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def close(self) -> None:
        self.release.set()
        self.down()
        self.client.close()


@pytest.fixture
def proxies(agl: AglServer) -> Iterator[Callable[[], Proxy]]:
    started: list[Proxy] = []

    def start() -> Proxy:
        started.append(Proxy(agl.url))
        return started[-1]

    yield start
    for proxy in started:
        proxy.close()


# -- the collector ----------------------------------------------------------------------------------------------------


class AglCollector(CollectorProcess):
    """``strands-tito collect --agl-url URL --agl-key KEY`` in a subprocess, its files in ``directory``."""

    def __init__(self, directory: Path, agl_url: str, key: str = KEY, *extra: str) -> None:
        args = ("--agl-url", agl_url, "--agl-key", key, *extra)
        out, log = directory / "trajectories.jsonl", directory / "collector.log"
        super().__init__(directory / "store", out, *args, stderr=log)

    def records(self) -> dict[str, dict[str, Any]]:
        """Trajectories written to JSONL, by Agent Lightning rollout id."""
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        records = [json.loads(line) for line in lines]
        return {r["resource"][capture.AGL_ROLLOUT_ID]: r for r in records if capture.AGL_ROLLOUT_ID in r["resource"]}


@pytest.fixture(scope="module")
def slow_proxy(agl: AglServer) -> Iterator[Proxy]:
    """Every answer from the server comes 0.3 s late, so a rollout's delivery takes longer than an agent's exit
    (without the held acknowledgement, its events would not all be there when the process is gone)."""
    proxy = Proxy(agl.url)
    proxy.delay = 0.3
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory, slow_proxy: Proxy) -> Iterator[AglCollector]:
    process = AglCollector(tmp_path_factory.mktemp("collector"), slow_proxy.url).start()
    yield process
    process.stop()


@contextlib.asynccontextmanager
async def collector_in_process(
    directory: Path, agl_url: str, *, key: str = KEY, ack_timeout: float = 8.0, grpc: bool = False
) -> AsyncIterator[Collector]:
    """The same collector service in this process, with a JSONL exporter and the Agent Lightning exporter."""
    exporter = AgentLightningExporter(agl_url, key, directory / "agentlightning.db", ack_timeout=ack_timeout)
    config = CollectorConfig(
        store=directory / "collector.db", http_port=0, grpc_port=0 if grpc else None, progress_interval=0
    )
    c = Collector(config, exporters=[JsonlExporter(directory / "out.jsonl"), exporter])
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def otlp_rollout(trajectory: Trajectory, rollout_id: str, reward: float) -> bytes:
    """What an agent process of a rollout sends: its turns, a reward and the end signal, AGL ids on the resource."""
    resource = {capture.AGL_ROLLOUT_ID: rollout_id, capture.AGL_ATTEMPT_ID: "0"}
    return make_request(all_spans(trajectory, reward), resource).SerializeToString()


def assert_matches_trajectory(completed: CompletedRollout, trajectory: Trajectory, model: str) -> None:
    """Per call exact (prompt = the whole context, response = the output, logprobs), and one merged row."""
    triplets = completed.triplets or []
    assert len(triplets) == len(trajectory.turns)
    for triplet, turn in zip(triplets, trajectory.turns, strict=True):
        end = turn.output_start + turn.output_length
        assert triplet.prompt["token_ids"] == trajectory.token_ids[: turn.output_start]
        assert triplet.response["token_ids"] == trajectory.token_ids[turn.output_start : end]
        expected = np.float32(trajectory.logprobs[turn.output_start : end])
        assert np.array_equal(np.float32(triplet.response["log_probs"]), expected)
        assert triplet.metadata["server"]["model"] == model
    [row] = merge(completed)
    assert_row_is_trajectory(row, trajectory.token_ids, trajectory.loss_mask, trajectory.logprobs)


# -- the events themselves --------------------------------------------------------------------------------------------


def test_events_are_agent_lightning_shapes() -> None:
    import random

    from agentlightning.schemas import EventCreate, ModelRequestData, RewardData

    trajectory = random_trajectory(random.Random(3), turns=2)
    record = {
        "trajectory_id": trajectory.trajectory_id,
        "complete": True,
        "model_id": "Qwen/Qwen3-8B",
        "rewards": [0.0, 1.0],
        "calls": [],
        **trajectory.to_dict(),
    }
    events = build_events(record)
    assert [e["event_type"] for e in events] == ["model_request", "model_request", "reward", "reward"]
    for index, event in enumerate(events):
        EventCreate.model_validate(event)
        assert event["data"][MARKER] == {"trajectory_id": trajectory.trajectory_id, "event": index, "events": 4}
    first = ModelRequestData.model_validate(events[0]["data"])
    assert first.status == "ok" and first.http_status == 200 and first.model == "Qwen/Qwen3-8B"
    assert events[0]["data"]["server"] == {"model": "Qwen/Qwen3-8B", "version": None}
    assert RewardData.model_validate(events[3]["data"]).value == 1.0
    # Lineage travels on every event's marker (the triplet view drops it; the raw view keeps it).
    lineage = {
        "episode_id": "rollout-7",
        "sample_index": 0,
        "parent_trajectory_id": "abc",
        "agent_name": "solver",
        "invocation_index": 1,  # the multi-agent structure too: a trainer credits per node from the raw view
        "purpose": "summary",
        "node": {"kind": "swarm", "run_id": "00f0", "node_id": "solver", "step": 1, "inputs": ["planner"]},
    }
    for event in build_events({**record, **lineage}):
        assert event["data"][MARKER] == {
            "trajectory_id": trajectory.trajectory_id,
            "event": ANY,
            "events": 4,
            **lineage,
        }
    # An incomplete trajectory is not training data: one diagnostic event instead.
    [event] = build_events({**record, "complete": False, "reason": "turn 1 is missing"})
    assert event["event_type"] == "strands_tito.incomplete"
    assert event["data"]["reason"] == "turn 1 is missing"


# -- R3: routed experts to the trainer ---------------------------------------------------------------------------------


async def test_r3_routing_reaches_the_trainer_as_the_engine_routed(
    agl: AglServer,
    start_engine: Callable[..., LocalEngine],
    qwen3: Any,
    memory: InMemorySpanExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real agent on an MoE engine (routing on), captured, through the collector to Agent Lightning's server; the
    trainer's own batch builder with R3 required gets one row whose routing is the engine's, position by position.
    (Without a layout to find, the model is not built at all: see the next test.)"""
    rollout_id = "r3-given"
    agl.create(rollout_id)
    monkeypatch.setenv("AGL_EVENT_URL", agl.event_url(rollout_id))
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="It is 2.")]),
        routed_experts=(3, 2, 8),
    )
    model = make_model(engine, qwen3, return_routed_experts=True, model_id="policy", routed_experts_layout=(3, 2, 8))
    agent = make_agent(model, [calculator])
    await agent.invoke_async("What is 5-3?")
    capture.record_reward(1.0, agent=agent)
    trajectory = model.token_manager
    model.reset()  # the end signal
    body = encode_spans(memory.get_finished_spans()).SerializeToString()
    async with collector_in_process(tmp_path, agl.url) as c:
        await post_otlp(f"http://127.0.0.1:{c.http_port}", body)
    raw = [e for e in agl.events(rollout_id) if e["event_type"] == "model_request"]
    completed = await asyncio.to_thread(trainer_reads, agl, rollout_id)
    assert_matches_trajectory(completed, trajectory, "policy")
    # Only the chain's last event carries routing, for the whole sequence (the server would drop it elsewhere).
    assert [("routed_experts" in e["data"]) for e in raw] == [False, True]
    batch = train_batch([completed], require_routed_experts=True)
    expected = routed_experts_for(trajectory.token_ids, 0, 3, 2, 8)  # what the engine routed, (len - 1, 3, 2)
    n, length = trajectory.initial_prompt_length, len(trajectory)
    [routes] = batch["routed_experts"]
    assert routes.dtype == np.uint8 and routes.shape == (8192, 3, 2)
    assert np.array_equal(routes[4096 - n : 4096], expected[:n])  # left-padded prompt rows
    assert np.array_equal(routes[4096 : 4096 + length - 1 - n], expected[n:])  # response rows
    assert not routes[4096 + length - 1 - n :].any() and not routes[: 4096 - n].any()
    [prompt] = batch["prompts"]
    [response] = batch["responses"]
    assert prompt[4096 - n :].tolist() + response[: length - n].tolist() == trajectory.token_ids


# The README's R3 model as an agent process: routing asked for, no layout given (the tokenizer comes from $TOKENIZER).
R3_AGENT = """
import os
from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from transformers import AutoTokenizer
from strands_tito import SGLangModel, record_reward

@tool
def add(a: int, b: int) -> int:
    "Add two integers."
    return a + b

model = SGLangModel(
    tokenizer=AutoTokenizer.from_pretrained(os.environ["TOKENIZER"]),
    base_url=os.environ["SGLANG_URL"],
    model_id="policy",
    return_routed_experts=True,
)
agent = Agent(model=model, tools=[add], conversation_manager=NullConversationManager(), callback_handler=None)
print(agent("What is 25 + 17? Use the add tool."))
record_reward(1.0, agent=agent)
"""


@pytest.mark.slow
@pytest.mark.parametrize("found_in", ["tokenizer folder", "server model path", "nowhere"])
def test_r3_without_a_layout_reaches_the_trainer_or_refuses_at_construction(
    agl: AglServer,
    collector: AglCollector,
    start_engine: Callable[..., LocalEngine],
    qwen3: Any,
    tokenizer_dir: Path,
    tmp_path: Path,
    found_in: str,
) -> None:
    """``SGLangModel(..., return_routed_experts=True)`` with no layout, in an agent process started with the
    controller's variables and capture's: the layout comes from the served model's config.json (the tokenizer's
    folder, or the folder the server reports), and the trainer, R3 required, gets the engine's routing; found
    nowhere, the process stops at construction with one line saying what to pass, and sends nothing."""
    rollout_id = f"r3-found-in-{found_in.replace(' ', '-')}"
    agl.create(rollout_id)
    served = moe_model_dir(tmp_path / "Qwen3-MoE", (3, 2, 8), tokenizer=qwen3)
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]),
        routed_experts=(3, 2, 8),
        model_path=str(served) if found_in == "server model path" else "org/not-cached-anywhere",
    )
    tokenizer = served if found_in == "tokenizer folder" else tokenizer_dir
    env = agent_env(agl, rollout_id, collector, SGLANG_URL=engine.base_url, TOKENIZER=str(tokenizer))
    done = subprocess.run(
        [sys.executable, "-c", R3_AGENT], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    if found_in == "nowhere":
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("strands_tito.providers.moe_layout.RoutedExpertsLayoutError: "), done.stderr[-2000:]
        assert "pass routed_experts_layout=(num_hidden_layers, num_experts_per_tok, num_experts)" in last
        assert not generate_records(engine) and not agl.events(rollout_id)
        return
    assert done.returncode == 0, done.stderr[-3000:]
    completed = trainer_reads(agl, rollout_id)
    raw = [e for e in agl.events(rollout_id) if e["event_type"] == "model_request"]
    assert [("routed_experts" in e["data"]) for e in raw] == [False, True]
    calls = generate_records(engine)
    token_ids = (calls[-1].input_ids or []) + (calls[-1].output_ids or [])
    batch = train_batch([completed], require_routed_experts=True)  # R3 required: raises without routing
    [routes] = batch["routed_experts"]
    [prompt] = batch["prompts"]
    n = len(calls[0].input_ids or [])
    expected = routed_experts_for(token_ids, 0, 3, 2, 8)  # what the engine routed, (len - 1, 3, 2)
    assert prompt[4096 - n :].tolist() == token_ids[:n]
    assert np.array_equal(routes[4096 - n : 4096], expected[:n])
    assert np.array_equal(routes[4096 : 4096 + len(token_ids) - 1 - n], expected[n:])


# -- real agents, started as Agent Lightning's controller starts them -------------------------------------------------


def agent_env(agl: AglServer, rollout_id: str, collector: AglCollector, **extra: str) -> dict[str, str]:
    """The controller's variables for one rollout, capture switched on, and nothing else of this test's."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_")) and k != "PYTHONPATH"
    }
    return {
        **clean,
        "AGL_KEY": KEY,
        "AGL_EVENT_URL": agl.event_url(rollout_id),
        "AGL_OPENAI_BASE_URL": f"{agl.url}/proxy/rollout/{rollout_id}/attempt/0/mode/train/openai/v1",
        capture.ENV_CAPTURE: "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        **extra,
    }


# Runs an unchanged example script, plus one probe: an exit handler registered before anything else, so it runs
# after strands-tito's (atexit is last in, first out), i.e. once the exit flush has returned. It reads the rollout's
# triplet view from the server right then. An agent process ends a good second after that (interpreter teardown),
# which alone would often give a slow exporter time to catch up; the probe leaves it no such slack.
EXIT_PROBE = """
import atexit, os, re, runpy, sys, urllib.request

def probe():
    base, rollout = re.match(r"(.*)/api/rollouts/([^/]+)/attempt/", os.environ["AGL_EVENT_URL"]).groups()
    request = urllib.request.Request(
        f"{base}/api/rollouts/{rollout}/events?format=triplet",
        headers={"Authorization": "Bearer " + os.environ["AGL_KEY"]},
    )
    sys.stderr.write("VIEW_AFTER_FLUSH " + urllib.request.urlopen(request).read().decode() + chr(10))

atexit.register(probe)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_agents(
    agl: AglServer, commands: dict[str, tuple[str, dict[str, str]]]
) -> dict[str, tuple[int, str, list[dict[str, Any]]]]:
    """Start every agent script at once, each under :data:`EXIT_PROBE`. Returns per rollout the exit status, stderr
    and the rollout's triplet view as it was the moment the agent's exit flush had returned (and the process was
    free to exit and the controller to mark the rollout succeeded)."""
    results: dict[str, tuple[int, str, list[dict[str, Any]]]] = {}

    def one(rollout_id: str, script: str, env: dict[str, str]) -> None:
        command = [sys.executable, "-c", EXIT_PROBE, script]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        views = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("VIEW_AFTER_FLUSH ")]
        results[rollout_id] = (proc.returncode, proc.stderr, json.loads(views[0]) if views else [])

    threads = [threading.Thread(target=one, args=(rid, *spec)) for rid, spec in commands.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.slow
def test_sglang_agents_exit_only_after_their_exact_rollouts_are_on_the_server(
    agl: AglServer, collector: AglCollector, slow_proxy: Proxy, start_engine: Callable[..., LocalEngine]
) -> None:
    """Four rollouts at once, each an unchanged Strands agent (SGLangModel) with a tool, started with the controller's
    variables. Every answer from the server is 0.3 s late, and each agent's events are all there the moment its exit
    flush returns: the exit waited for them (with ``--agl-ack-timeout 0`` this view is empty). What the trainer reads
    is exact, call by call and merged."""
    n = 4
    scripts = [
        Script(
            turns=[Reply(text=hermes_call("add", a=10 + i, b=17)), Reply(text=f"{10 + i} + 17 = {27 + i}.")],
            match=f"Rollout {i}:",
        )
        for i in range(n)
    ]
    engine = start_engine(*scripts)
    commands = {}
    for i in range(n):
        rollout_id = f"sglang-{i}"
        agl.create(rollout_id)
        env = agent_env(
            agl,
            rollout_id,
            collector,
            SGLANG_URL=engine.base_url,
            MODEL_ID=engine.model_path,
            QUESTION=f"Rollout {i}: What is {10 + i} + 17?",
            ANSWER=str(27 + i if i % 2 == 0 else 28 + i),  # odd rollouts expect a wrong sum: they score 0
        )
        commands[rollout_id] = (str(EXAMPLES / "agl_agent.py"), env)
    posts_before = slow_proxy.event_posts()
    results = run_agents(agl, commands)

    records = collector.records()
    for i in range(n):
        rollout_id = f"sglang-{i}"
        returncode, stderr, view_at_flush = results[rollout_id]
        assert returncode == 0, stderr[-3000:]
        # On time: everything was on the server once the exit flush had returned, before the process was gone.
        assert [e["event_type"] for e in view_at_flush] == ["model_request", "model_request", "reward"]
        completed = trainer_reads(agl, rollout_id)
        assert [e["data"] for e in completed.triplet_events] == [e["data"] for e in view_at_flush]
        assert completed.final_reward == (1.0 if i % 2 == 0 else 0.0)
        # Exact: each call is what the engine received and produced for this rollout's conversation.
        conversation = next(
            r.conversation for r in generate_records(engine) if r.script == i and r.conversation is not None
        )
        calls = generate_records(engine, conversation)
        triplets = completed.triplets or []
        assert len(triplets) == len(calls) == 2
        for triplet, call in zip(triplets, calls, strict=True):
            assert triplet.prompt["token_ids"] == call.input_ids
            assert triplet.response["token_ids"] == call.output_ids
            assert np.array_equal(np.float32(triplet.response["log_probs"]), np.float32(call.output_logprobs))
            assert triplet.metadata["server"] == {"model": engine.model_path, "version": None}
        assert [e["data"]["status"] for e in view_at_flush[:2]] == ["ok", "ok"]
        # The trainer's merge gives one row per rollout, and it is the captured trajectory.
        record = records[rollout_id]
        assert record["complete"], record["reason"]
        [row] = merge(completed)
        assert_row_is_trajectory(row, record["token_ids"], record["loss_mask"], record["logprobs"])
        assert row["prompt"] + row["response"] == (calls[-1].input_ids or []) + (calls[-1].output_ids or [])
        assert_delivered_once(agl.events(rollout_id))
    assert slow_proxy.event_posts() - posts_before == 3 * n  # nothing posted twice


@pytest.mark.slow
@pytest.mark.parametrize("thinking", [False, True], ids=["prefix-kept", "reasoning-dropped"])
def test_stock_openai_agent_calls_are_exact_even_where_the_merge_splits(
    agl: AglServer, collector: AglCollector, start_engine: Callable[..., LocalEngine], thinking: bool
) -> None:
    """An unchanged OpenAIModel agent: each call's triplet is exactly what the server tokenized and generated; the
    trainer's merge splits exactly where the collector measured that a prompt does not extend the previous call.

    With a reasoning parser the server hands the thinking back as ``reasoning_content``, the agent does not send it
    back, and the re-rendered history no longer extends the first call: the merge splits there.
    """
    think = "<think>\nThe add tool does this.\n</think>\n\n" if thinking else ""
    engine = start_engine(
        Script(turns=[Reply(text=think + hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]),
        openai_flavor="vllm",
        reasoning_parser="qwen3" if thinking else None,
    )
    rollout_id = f"openai-{thinking}"
    agl.create(rollout_id)
    env = agent_env(agl, rollout_id, collector, OPENAI_BASE_URL=engine.base_url + "/v1", MODEL_ID=engine.model_path)
    [(returncode, stderr, view_at_flush)] = run_agents(
        agl, {rollout_id: (str(EXAMPLES / "openai_agent.py"), env)}
    ).values()
    assert returncode == 0, stderr[-3000:]
    calls = engine.chat_records()
    assert [e["event_type"] for e in view_at_flush] == ["model_request"] * len(calls) == ["model_request"] * 2
    completed = trainer_reads(agl, rollout_id)
    for triplet, call in zip(completed.triplets or [], calls, strict=True):
        assert triplet.prompt["token_ids"] == call.input_ids
        assert triplet.response["token_ids"] == call.output_ids
        assert np.array_equal(np.float32(triplet.response["log_probs"]), np.float32(call.output_logprobs))
        assert triplet.metadata["server"]["model"] == engine.model_path
    record = collector.records()[rollout_id]
    assert record["complete"], record["reason"]
    splits = sum(1 for check in record["prefix_report"] if not check["shares_prefix"])
    assert splits == int(thinking)
    rows = merge(completed)
    assert len(rows) == 1 + splits
    # Each row is its calls, with exactly the calls' outputs trainable.
    starts = [0] + [check["index"] for check in record["prefix_report"] if not check["shares_prefix"]]
    for row, start in zip(rows, starts, strict=True):
        assert row["prompt"] == calls[start].input_ids
    assert sum(sum(row["mask"]) for row in rows) == sum(len(call.output_ids or []) for call in calls)
    assert_delivered_once(agl.events(rollout_id))


@pytest.mark.slow
def test_the_controller_runs_the_example_and_the_trainer_gets_its_data(
    agl: AglServer, collector: AglCollector, start_engine: Callable[..., LocalEngine], tmp_path: Path
) -> None:
    """The README recipe: Agent Lightning's controller (local runner) starts examples/agl_agent.py for a rollout with
    nothing but environment variables; the moment the rollout is succeeded, the trainer reads exact data."""
    engine = start_engine(Script(turns=[Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]))
    env = agent_env(agl, "unused", collector, SGLANG_URL=engine.base_url, MODEL_ID=engine.model_path)
    for name in ("AGL_KEY", "AGL_EVENT_URL", "AGL_OPENAI_BASE_URL"):
        env.pop(name)  # the controller sets these per rollout
    env["PYTHONPATH"] = str(EXAMPLES)
    controller = subprocess.Popen(
        [
            str(BIN / "agl-controller"),
            "runner_type=local",
            f"agl_server.url={agl.url}",
            f"agl_server.key={KEY}",
            "local_runner.poll_interval=0.2",
            f"hydra.run.dir={tmp_path / 'hydra'}",
            "hydra.output_subdir=null",
        ],
        env=env,
        cwd=tmp_path,
        stdout=(tmp_path / "controller.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        rollout_id = "controller-0"
        agl.create(
            rollout_id,
            running=False,
            input={"question": "What is 25 + 17?", "answer": "42"},
            config={
                "timeout_seconds": 120,
                "local": {
                    "agent_class": "agl_agent:CalcAgent",
                    "env_map": {"QUESTION": "input.question", "ANSWER": "input.answer"},
                },
            },
        )
        state = wait_for(
            lambda: (s := agl.state(rollout_id)) in ("succeeded", "failed") and s, 120, "the rollout to end", 0.02
        )
        completed = trainer_reads(agl, rollout_id)  # right away, as the trainer does
    finally:
        controller.send_signal(signal.SIGTERM)
        controller.wait(30)
    assert state == "succeeded", (tmp_path / "controller.log").read_text()[-3000:]
    assert completed.final_reward == 1.0
    calls = generate_records(engine)
    triplets = completed.triplets or []
    assert [t.prompt["token_ids"] for t in triplets] == [c.input_ids for c in calls]
    assert [t.response["token_ids"] for t in triplets] == [c.output_ids for c in calls]
    assert triplets[-1].reward == 1.0
    [row] = merge(completed)
    record = collector.records()[rollout_id]
    assert_row_is_trajectory(row, record["token_ids"], record["loss_mask"], record["logprobs"])


# -- on time: the acknowledgement waits for delivery ------------------------------------------------------------------


async def post_otlp(endpoint: str, body: bytes, timeout: float = 30) -> float:
    """Send one OTLP request as an agent's exporter does; returns how long the acknowledgement took."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=timeout) as http:
        r = await http.post(f"{endpoint}/v1/traces", content=body, headers=PB)
    assert r.status_code == 200, r.text
    return time.monotonic() - started


def export_grpc(port: int, body: bytes) -> float:
    """The same over OTLP/gRPC."""
    started = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        stub.Export(ExportTraceServiceRequest.FromString(body), timeout=30)
    return time.monotonic() - started


@pytest.mark.parametrize(("hold", "protocol"), [(True, "http"), (True, "grpc"), (False, "http")])
async def test_the_acknowledgement_waits_until_the_events_are_stored(
    agl: AglServer, proxies: Callable[[], Proxy], tmp_path: Path, hold: bool, protocol: str
) -> None:
    """The proof's control: with answers 0.2 s late, the acknowledgement of the request that ends a rollout's
    trajectory comes only once all its events are stored; without holding it, the agent would exit first."""
    import random

    proxy = proxies()
    proxy.delay = 0.2
    rollout_id = f"ack-{hold}-{protocol}"
    agl.create(rollout_id)
    trajectory = random_trajectory(random.Random(11), turns=3)
    body = otlp_rollout(trajectory, rollout_id, 1.0)
    async with collector_in_process(tmp_path, proxy.url, ack_timeout=8.0 if hold else 0.0, grpc=True) as c:
        if protocol == "grpc":
            assert c.grpc_port is not None
            waited = await asyncio.to_thread(export_grpc, c.grpc_port, body)
        else:
            waited = await post_otlp(f"http://127.0.0.1:{c.http_port}", body)
        at_ack = await asyncio.to_thread(agl.events, rollout_id, triplet=True)
        if hold:
            assert len(at_ack) == 4, at_ack  # 3 calls and the reward
            assert waited >= 4 * 0.2
            assert_matches_trajectory(await asyncio.to_thread(trainer_reads, agl, rollout_id), trajectory, "test-model")
        else:
            assert len(at_ack) < 4 and waited < 0.5
            await asyncio.to_thread(wait_for, lambda: len(agl.events(rollout_id)) == 4, 10, "late delivery")


async def test_each_sample_of_a_rewritten_episode_is_one_training_row(
    agl: AglServer, tmp_path: Path, start_engine: Callable[..., LocalEngine], qwen3: Any
) -> None:
    """A sliding window rewrote the agent's history, so its episode is several samples (``docs/samples.md``). Sent as
    one rollout, the trainer's trajectory-level merge gives exactly one row per sample, each the sample itself."""
    from ..helpers.agents import sliding_window_agent, stepping_engine

    engine = stepping_engine(start_engine, qwen3, 10)
    model = make_model(engine, qwen3)
    agent = sliding_window_agent(model, engine)
    await agent.invoke_async("Do the task step by step.")
    samples = model.samples
    assert len(samples) > 2
    rollout_id = "rewritten-episode"
    agl.create(rollout_id)
    async with collector_in_process(tmp_path, agl.url) as c:
        for sample in samples:  # each acknowledged once its events are stored: the rollout keeps the samples' order
            await post_otlp(f"http://127.0.0.1:{c.http_port}", otlp_rollout(sample, rollout_id, 1.0))
    rows = merge(await asyncio.to_thread(trainer_reads, agl, rollout_id))
    assert len(rows) == len(samples)
    for row, sample in zip(rows, samples, strict=True):
        assert_row_is_trajectory(row, sample.token_ids, sample.loss_mask, sample.logprobs)


async def test_many_rollouts_at_once_each_complete_when_acknowledged(agl: AglServer, tmp_path: Path) -> None:
    """Thirty-two agents end their rollouts at the same moment: each one's acknowledgement comes once its own events
    are stored, and every rollout is exact."""
    import random

    rng = random.Random(17)
    trajectories = {f"many-{i}": random_trajectory(rng, turns=rng.randint(1, 5)) for i in range(32)}
    for rollout_id in trajectories:
        agl.create(rollout_id)

    async with collector_in_process(tmp_path, agl.url) as c:
        endpoint = f"http://127.0.0.1:{c.http_port}"

        async def agent(rollout_id: str, trajectory: Trajectory) -> float:
            waited = await post_otlp(endpoint, otlp_rollout(trajectory, rollout_id, float(len(trajectory.turns))))
            view = await asyncio.to_thread(agl.events, rollout_id, triplet=True)
            assert len(view) == len(trajectory.turns) + 1, rollout_id  # all there at the acknowledgement
            return waited

        waits = await asyncio.gather(*(agent(rid, t) for rid, t in trajectories.items()))
    assert max(waits) < 8
    for rollout_id, trajectory in trajectories.items():
        completed = trainer_reads(agl, rollout_id)
        assert completed.final_reward == float(len(trajectory.turns))
        assert_matches_trajectory(completed, trajectory, "test-model")
        assert_delivered_once(agl.events(rollout_id))


# -- nothing lost, nothing doubled ------------------------------------------------------------------------------------


async def test_server_down_for_a_while_then_up(
    agl: AglServer, proxies: Callable[[], Proxy], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Unreachable server: agents are acknowledged after the bounded wait, the events wait in the store and are
    retried with backoff, and arrive exactly once when the server is back."""
    import random

    rng = random.Random(5)
    proxy = proxies()
    proxy.down()
    trajectories = {f"down-{i}": random_trajectory(rng, turns=rng.randint(1, 4)) for i in range(3)}
    for rollout_id in trajectories:
        agl.create(rollout_id)
    async with collector_in_process(tmp_path, proxy.url, ack_timeout=0.5) as c:
        endpoint = f"http://127.0.0.1:{c.http_port}"
        waits = await asyncio.gather(
            *(post_otlp(endpoint, otlp_rollout(t, rid, 0.5)) for rid, t in trajectories.items())
        )
        assert all(0.4 < w < 3 for w in waits), waits  # bounded: held, then acknowledged anyway
        await asyncio.sleep(2.0)
        assert all(agl.events(rid) == [] for rid in trajectories)
        assert c.store.counts()["outbox"] >= len(trajectories)  # waiting in the durable store
        assert c.metrics.export_failures.get("agentlightning", 0) >= 2  # retried ...
        assert c.metrics.export_failures["agentlightning"] <= 4  # ... with backoff
        up_at = time.monotonic()
        proxy.up()

        def delivered() -> bool:
            return all(len(agl.events(rid)) == len(t.turns) + 1 for rid, t in trajectories.items())

        await asyncio.to_thread(wait_for, delivered, 20, "delivery after the server came back")
        recovery = time.monotonic() - up_at
    assert recovery < 10
    for rollout_id, trajectory in trajectories.items():
        assert_delivered_once(agl.events(rollout_id))
        assert_matches_trajectory(trainer_reads(agl, rollout_id), trajectory, "test-model")
    assert any("export failed" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
@pytest.mark.parametrize("reached_server", [True, False], ids=["stored-unanswered", "never-arrived"])
def test_kill_9_mid_delivery_neither_drops_nor_reposts(
    agl: AglServer, proxies: Callable[[], Proxy], tmp_path: Path, reached_server: bool
) -> None:
    """The collector dies with one event POST in flight: stored by the server but unanswered, or never arrived. After
    a restart every event is on the server exactly once, in order."""
    import random

    proxy = proxies()
    proxy.hold_at, proxy.hold_forwards = 3, reached_server
    rollout_id = f"kill-{reached_server}"
    agl.create(rollout_id)
    trajectory = random_trajectory(random.Random(23), turns=5)
    process = AglCollector(tmp_path, proxy.url).start()
    try:
        body, url = otlp_rollout(trajectory, rollout_id, 1.0), f"{process.endpoint}/v1/traces"

        def send() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the collector dies while it holds the acknowledgement
                httpx.post(url, content=body, headers=PB, timeout=30)

        threading.Thread(target=send, daemon=True).start()
        assert proxy.holding.wait(60), "the third event was never posted"
        process.kill()
        proxy.hold_at = None
        proxy.release.set()
        before = [e["data"][MARKER]["event"] for e in agl.events(rollout_id)]
        assert before == ([0, 1, 2] if reached_server else [0, 1])
        process.start()
        wait_for(lambda: len(agl.events(rollout_id)) >= 6, 30, "delivery after the restart")
        time.sleep(0.5)  # anything more would be a duplicate
    finally:
        process.stop()
    raw = agl.events(rollout_id)
    assert_delivered_once(raw)
    assert len(raw) == 6
    assert proxy.event_posts() == (6 if reached_server else 7)  # the held one is not posted again once stored
    assert_matches_trajectory(trainer_reads(agl, rollout_id), trajectory, "test-model")


# -- a wrong key ------------------------------------------------------------------------------------------------------


def test_wrong_key_stops_the_collector_at_start_with_a_clear_error(agl: AglServer, tmp_path: Path) -> None:
    process = AglCollector(tmp_path, agl.url, "not-the-key")
    with pytest.raises(RuntimeError, match="did not start"):
        process.start()
    assert process.proc is not None and process.proc.wait(30) == 2
    error = process.stderr.read_text()
    assert "refused the key given by --agl-key" in error and "401" in error
    assert "not-the-key" not in error


async def test_wrong_key_at_run_time_is_a_clear_error_without_a_retry_storm(
    agl: AglServer, proxies: Callable[[], Proxy], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server was down at start (the key could not be checked) and refuses the key once up: a clear error,
    retries with backoff only, nothing posted, nothing lost: with the right key the events go out."""
    import random

    caplog.set_level(logging.ERROR)
    proxy = proxies()
    proxy.down()
    rollout_id = "wrong-key"
    agl.create(rollout_id)
    trajectory = random_trajectory(random.Random(31), turns=2)
    async with collector_in_process(tmp_path, proxy.url, key="not-the-key", ack_timeout=0.3) as c:
        proxy.up()
        await post_otlp(f"http://127.0.0.1:{c.http_port}", otlp_rollout(trajectory, rollout_id, 1.0))
        await asyncio.sleep(5)
        assert c.store.counts()["outbox"] == 1  # JSONL done; Agent Lightning waiting
    refused = [status for _, _, status in proxy.requests if status == 401]
    assert 1 <= len(refused) <= 5, proxy.requests  # about one try per backoff step, not a storm
    assert agl.events(rollout_id) == []
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("refused the key given by --agl-key" in m and "401" in m for m in messages), messages
    assert not any("not-the-key" in m for m in messages)
    # Fixed key, same store: everything is delivered.
    async with collector_in_process(tmp_path, proxy.url) as c:
        await asyncio.to_thread(wait_for, lambda: len(agl.events(rollout_id)) == 3, 20, "delivery with the right key")
    assert_matches_trajectory(trainer_reads(agl, rollout_id), trajectory, "test-model")


HOSTILE_ROLLOUT_IDS = ["../../../admin/purge?all=1#", "ro-1\r\nX-Injected: 1", "ro%2F..%2Fadmin", "..", "a/b"]


async def test_hostile_rollout_ids_never_build_a_url(
    agl: AglServer, proxies: Callable[[], Proxy], tmp_path: Path
) -> None:
    """A rollout id that would change the URL is refused at ingest with the reason (400), and an exporter handed such
    a record (an older store) skips it without any request; later rollouts are delivered."""
    import random

    proxy = proxies()
    good = random_trajectory(random.Random(41), turns=2)
    agl.create("clean-rollout")
    async with collector_in_process(tmp_path, proxy.url, ack_timeout=0.5) as c:
        endpoint = f"http://127.0.0.1:{c.http_port}"
        async with httpx.AsyncClient(timeout=30) as http:
            for rollout_id in HOSTILE_ROLLOUT_IDS:
                body = otlp_rollout(random_trajectory(random.Random(7), turns=1), rollout_id, 1.0)
                r = await http.post(f"{endpoint}/v1/traces", content=body, headers=PB)
                assert r.status_code == 400 and "agentlightning.rollout_id" in r.text, r.text
        await post_otlp(endpoint, otlp_rollout(good, "clean-rollout", 1.0))
        await asyncio.to_thread(wait_for, lambda: len(agl.events("clean-rollout")) == 3, 20, "the good rollout")
        record = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[-1])
    exporter = AgentLightningExporter(proxy.url, KEY, tmp_path / "direct.db", ack_timeout=0)
    delivered: list[str] = []
    try:
        for n, rollout_id in enumerate(HOSTILE_ROLLOUT_IDS):
            hostile = {**record, "trajectory_id": f"hostile-{n}", "resource": {capture.AGL_ROLLOUT_ID: rollout_id}}
            delivered.extend(exporter.deliver([hostile], f"p{n}"))
    finally:
        exporter.close()
    assert delivered == [f"hostile-{n}" for n in range(len(HOSTILE_ROLLOUT_IDS))]  # skipped, never jammed
    paths = [path for _, path, _ in proxy.requests]
    assert not any("admin" in path or ".." in path or "hostile" in path for path in paths), paths


def test_collect_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from strands_tito.collector.cli import parse_args

    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)  # no logging set-up in the test process
    monkeypatch.setattr(logging.getLogger("httpx"), "level", logging.getLogger("httpx").level)

    config = parse_args(["--agl-url", "http://127.0.0.1:8080", "--agl-key", KEY, "--agl-ack-timeout", "3"])
    assert (config.agl_url, config.agl_key, config.agl_ack_timeout, config.agl_model) == (
        "http://127.0.0.1:8080",
        KEY,
        3.0,
        None,
    )
    assert KEY not in repr(config)  # the key stays out of logs and reprs
    for argv in (["--agl-key", "k"], ["--agl-model", "m"], ["--agl-url", "http://h", "--agl-ack-timeout", "-1"]):
        with pytest.raises(SystemExit):
            parse_args(argv)
