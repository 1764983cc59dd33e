"""A bounded soak with faults (about a minute and a half): agent processes exporting over HTTP and gRPC, the collector
paused and killed, an agent process killed, hostile traffic throughout. Every episode of every agent process that
exits normally is written exactly once, complete and equal token for token to what the engine saw.

All real processes on 127.0.0.1: ``strands-tito collect`` on fixed ports (a restart comes back where the agents
send), agent processes of real Strands agents (``tests/capture/spool_load_agents.py``, capture switched on by
environment variables), the local engine in this process.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito.capture.spool import Spool, encode_request, spool_key
from strands_tito.testing.engine import LocalEngine, Reply, Script

from ..helpers.agents import generate_records, hermes_call
from ..helpers.capture import emit_turn_spans as sdk_turn_spans
from ..helpers.collector import PB, CollectorProcess, free_port, read_records
from ..helpers.otlp import all_spans, make_request, random_trajectory, turn_spans

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4  # agent processes: even ones export over HTTP, odd ones over gRPC
AGENTS = 5  # agents per process
ROUNDS = 2
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[CollectorProcess]:
    """``strands-tito collect`` on fixed HTTP and gRPC ports (a restart comes back where the agents send)."""
    c = CollectorProcess(tmp_path / "store", tmp_path / "out.jsonl", port=free_port())
    c.grpc = free_port()
    c.extra = ["--grpc", f"127.0.0.1:{c.grpc}", "--log-level", "ERROR", "--max-connections", "64"]
    c.start()
    yield c
    c.stop()


@pytest.fixture
def soak_engine(start_engine: Callable[..., LocalEngine]) -> LocalEngine:
    turns = [Reply(text=hermes_call("add", a=1, b=2), delay=0.4), Reply(text="It is 3.", delay=0.4)] * ROUNDS
    return start_engine(*[Script(turns=list(turns)) for _ in range(PROCESSES * AGENTS)])


def start_agents(
    engine: LocalEngine, collector: CollectorProcess, index: int, directory: Path
) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_"))}
    protocol, port = ("grpc", collector.grpc) if index % 2 else ("http/protobuf", collector.port)
    env.update(
        {
            "SGLANG_URL": engine.base_url,
            "STRANDS_TITO_CAPTURE": "1",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
            "OTEL_SERVICE_NAME": f"soak-{index}",
            "STRANDS_TITO_SPOOL_DIR": str(directory / "spool"),
            "STRANDS_TITO_FLUSH_TIMEOUT": "60",
            "AGENT_NUMBER_FROM": str(index * AGENTS),
        }
    )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "capture" / "spool_load_agents.py"), str(AGENTS), str(ROUNDS)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=(directory / f"agents-{index}.stderr").open("w"),
        text=True,
        cwd=ROOT,
    )


def hostile(collector: CollectorProcess, stop: threading.Event, written: Any) -> None:
    """Garbage, late spans of a written trajectory, unusable rollout ids, idle sockets; over HTTP and gRPC."""
    rng = random.Random(13)
    late = make_request(turn_spans(written)).SerializeToString()
    bad_id = make_request(all_spans(random_trajectory(rng)), {"agentlightning.rollout_id": "../x?y#"})
    bodies = [b"\x00\xffgarbage" * 50, late, bad_id.SerializeToString(), b"\x1f\x8b\x08 not gzip"]
    idle: list[socket.socket] = []
    while not stop.is_set():
        body = rng.choice(bodies)
        try:
            if rng.random() < 0.5:
                httpx.post(f"http://127.0.0.1:{collector.port}/v1/traces", content=body, headers=PB, timeout=2)
            else:
                with grpc.insecure_channel(f"127.0.0.1:{collector.grpc}") as channel:
                    call = channel.unary_unary(EXPORT)
                    with pytest.raises(grpc.RpcError):
                        call(body, timeout=2)
            if len(idle) < 20:
                idle.append(socket.create_connection(("127.0.0.1", collector.port), timeout=2))
            elif rng.random() < 0.3:
                idle.pop(0).close()
        except (httpx.HTTPError, OSError, pytest.fail.Exception):
            pass  # the collector is paused or restarting
        stop.wait(0.05)
    for s in idle:
        s.close()


@pytest.mark.slow
def test_soak_with_faults_every_normal_episode_exact_and_single(  # noqa: PLR0915  the soak's scenario, phase by phase
    soak_engine: LocalEngine, collector: CollectorProcess, tmp_path: Path
) -> None:
    written = random_trajectory(random.Random(3))
    r = httpx.post(f"http://127.0.0.1:{collector.port}/v1/traces", content=make_request(all_spans(written))
                   .SerializeToString(), headers=PB, timeout=10)  # fmt: skip
    assert r.status_code == 200
    # A previous process of service soak-0 left late turns of that written trajectory in its spool: the collector
    # refuses them; soak-0 adopts them at start and must not let them hold up its own episodes.
    memory = InMemorySpanExporter()
    previous = TracerProvider()
    previous.add_span_processor(SimpleSpanProcessor(memory))
    sdk_turn_spans(previous, written)
    endpoint = f"http/protobuf http://127.0.0.1:{collector.port}"
    left = Spool(tmp_path / "spool" / spool_key("soak-0", endpoint))
    left.append(encode_request(memory.get_finished_spans()))
    left.close()
    stop = threading.Event()
    attacker = threading.Thread(target=hostile, args=(collector, stop, written), daemon=True)
    attacker.start()
    agents = [start_agents(soak_engine, collector, i, tmp_path) for i in range(PROCESSES)]
    try:
        for proc in agents:
            assert proc.stdout is not None
            assert "started" in proc.stdout.readline()
        time.sleep(1.5)
        collector.signal(signal.SIGSTOP)
        time.sleep(3)
        collector.signal(signal.SIGCONT)
        time.sleep(1.0)
        agents[-1].send_signal(signal.SIGKILL)  # an agent process dies mid-run: its episodes are not asserted
        collector.signal(signal.SIGKILL)
        time.sleep(2)
        collector.start()
        for proc in agents[:-1]:
            assert proc.wait(150) == 0, (tmp_path / f"agents-{agents.index(proc)}.stderr").read_text()[-3000:]
    finally:
        stop.set()
        attacker.join(10)
        for proc in agents:
            if proc.poll() is None:
                proc.kill()
    finished = (PROCESSES - 1) * AGENTS
    records = read_records(tmp_path / "out.jsonl", finished + 1, 90)
    ids = [record["trajectory_id"] for record in records]
    assert len(ids) == len(set(ids)), "a trajectory was written twice"
    by_tokens = {tuple(record["token_ids"]): record for record in records}
    assert by_tokens.pop(tuple(written.token_ids))["complete"]
    normal = {f"soak-{i}" for i in range(PROCESSES - 1)}
    exact = 0
    for conversation in {r.conversation for r in generate_records(soak_engine)}:
        calls = generate_records(soak_engine, conversation)
        final = tuple((calls[-1].input_ids or []) + (calls[-1].output_ids or []))
        record = by_tokens.get(final)
        if record is None or record["resource"].get("service.name") not in normal:
            continue
        assert record["complete"], record["reason"]
        assert [t for t, m in zip(record["token_ids"], record["loss_mask"], strict=True) if m] == [
            i for c in calls for i in c.output_ids or []
        ]
        exact += 1
    assert exact == finished, f"{exact} of {finished} episodes of normally exiting processes are exact"
    refused = (tmp_path / "agents-0.stderr").read_text()
    assert f"refused {len(written.turns)} span(s) of trajectory {written.trajectory_id}" in refused
