"""Endpoint mistakes named at once, with the fix, and nothing lost.

Each test starts the unchanged demo agent in a fresh process with only the documented variables
(``STRANDS_TITO_CAPTURE=1`` and a mistyped ``OTEL_EXPORTER_OTLP_*``), capture's own tracer provider, and a real
``strands-tito collect`` process on 127.0.0.1 with its HTTP and gRPC ports. The agent must say what is wrong in one
line, without the exporter's retry noise; it must exit without waiting out the flush bound or the exporter's retries
(both are set far beyond the subprocess's timeout, so a wait fails the test); and `strands-tito spool resend` must then
bring the collector the exact trajectory.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest

from strands_tito.capture import recorder as capture
from strands_tito.capture.endpoint_check import export_target, find_endpoint_mistake
from strands_tito.testing.engine import LocalEngine, Reply, Script

from ..helpers.agents import generate_records, hermes_call
from ..helpers.collector import read_records

ROOT = Path(__file__).resolve().parents[2]
AGENT = ("-m", "strands_tito.testing.demo_agent")
TIMEOUT = 60


class Collector:
    """``strands-tito collect`` with OTLP/HTTP and OTLP/gRPC on free ports of 127.0.0.1, writing JSONL."""

    def __init__(self, tmp_path: Path) -> None:
        self.out = tmp_path / "out.jsonl"
        command = [sys.executable, "-m", "strands_tito.cli", "collect", "--http", "127.0.0.1:0"]
        command += ["--grpc", "127.0.0.1:0", "--store", str(tmp_path / "store"), "--jsonl", str(self.out)]
        command += ["--progress-interval", "0", "--log-level", "WARNING"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on http://[\d.]+:(\d+) and grpc [\d.]+:(\d+)", line)
        if match is None:
            self.proc.kill()
            raise RuntimeError(f"collector did not start: {line!r}")
        self.http_port, self.grpc_port = int(match.group(1)), int(match.group(2))

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[Collector]:
    started = Collector(tmp_path)
    yield started
    started.stop()


@pytest.fixture
def engine(start_engine: Callable[..., LocalEngine]) -> LocalEngine:
    return start_engine(Script(turns=[Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]))


def run_agent(engine: LocalEngine, env: dict[str, str]) -> str:
    """The demo agent with capture switched on by ``env`` alone; its stderr."""
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGL_", "STRANDS_TITO_"))}
    clean.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, *AGENT],
        env={**clean, "SGLANG_URL": engine.base_url, **env},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "42" in done.stdout
    # transformers' own start-up notice (no PyTorch here) is not ours.
    return "\n".join(line for line in done.stderr.splitlines() if not line.startswith("[transformers]"))


MISTAKES: dict[str, tuple[Callable[[Collector], dict[str, str]], Callable[[Collector], list[str]]]] = {
    "signal path on the base variable": (
        lambda c: {"OTEL_EXPORTER_OTLP_ENDPOINT": f"{c.http}/v1/traces"},
        lambda c: [
            "ends in a signal path",
            f"set OTEL_EXPORTER_OTLP_ENDPOINT={c.http},",
            f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={c.http}/v1/traces",
        ],
    ),
    "no signal path on the traces variable": (
        lambda c: {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": c.http},
        lambda c: ["is used as is, without /v1/traces", f"set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={c.http}/v1/traces"],
    ),
    "HTTP to the gRPC port": (
        lambda c: {"OTEL_EXPORTER_OTLP_ENDPOINT": c.grpc},
        lambda c: [f"{c.grpc} speaks gRPC", "set OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "HTTP port"],
    ),
    "gRPC to the HTTP port": (
        lambda c: {"OTEL_EXPORTER_OTLP_ENDPOINT": c.http, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        lambda c: [f"{c.http} speaks HTTP/1", "unset OTEL_EXPORTER_OTLP_PROTOCOL", "gRPC port"],
    ),
    # Strands' other spans too (the standard sampler variable): they go through the SDK's batch processor, whose exit
    # flush would wait out the exporter's retries.
    "gRPC to the HTTP port, every span recorded": (
        lambda c: {
            "OTEL_EXPORTER_OTLP_ENDPOINT": c.http,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        },
        lambda c: [f"{c.http} speaks HTTP/1"],
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_an_endpoint_mistake_is_named_once_and_the_spool_keeps_everything(
    mistake: str, collector: Collector, engine: LocalEngine, tmp_path: Path
) -> None:
    settings, expected = MISTAKES[mistake]
    spool_dir = tmp_path / "spool"
    env = {
        capture.ENV_CAPTURE: "1",
        "STRANDS_TITO_SPOOL_DIR": str(spool_dir),
        # Far beyond the subprocess's timeout: an exit that waits for the acknowledgement, or for the exporter's
        # retries, fails the test.
        "STRANDS_TITO_FLUSH_TIMEOUT": "120",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "120",
        **settings(collector),
    }
    stderr = run_agent(engine, env)
    lines = [line for line in stderr.splitlines() if line.strip()]
    [reported] = [line for line in lines if line.startswith("strands-tito:")]
    for part in expected(collector):
        assert part in reported, reported
    assert str(spool_dir) in reported and "strands-tito spool resend --endpoint URL" in reported
    assert lines == [reported], stderr  # no exporter noise, no "some may be lost" at exit

    cli = [sys.executable, "-m", "strands_tito.cli", "spool", "--dir", str(spool_dir)]
    resent = subprocess.run(
        [*cli, "resend", "--endpoint", collector.http], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert resent.returncode == 0 and "sent" in resent.stdout, resent.stderr
    [record] = read_records(collector.out, 1)
    assert record["complete"], record
    last = generate_records(engine)[-1]
    assert record["token_ids"] == (last.input_ids or []) + (last.output_ids or [])


def test_a_url_that_answers_but_is_not_a_receiver_is_named(engine: LocalEngine, tmp_path: Path) -> None:
    """The engine's own address given as the collector's: it answers, with 404, as any web server would."""
    spool_dir = tmp_path / "spool"
    env = {
        capture.ENV_CAPTURE: "1",
        "STRANDS_TITO_SPOOL_DIR": str(spool_dir),
        "STRANDS_TITO_FLUSH_TIMEOUT": "120",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "120",
        "OTEL_EXPORTER_OTLP_ENDPOINT": engine.base_url,
    }
    lines = [line for line in run_agent(engine, env).splitlines() if line.strip()]
    [reported] = lines
    assert f"{engine.base_url}/v1/traces answers (HTTP 404" in reported, reported
    assert (
        "is not an OTLP/HTTP trace receiver" in reported and "OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:4318" in reported
    )
    assert str(spool_dir) in reported


# -- the check on its own, against servers on 127.0.0.1 ----------------------------------------------------------------


def test_a_working_collector_is_not_reported(collector: Collector) -> None:
    for env in (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.http},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": f"{collector.http}/"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector.http}/v1/traces"},
    ):
        assert find_endpoint_mistake(export_target("http/protobuf", env)) is None, env
    assert find_endpoint_mistake(export_target("grpc", {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.grpc})) is None


class _Answer(BaseHTTPRequestHandler):
    status = 200
    content_type = "text/html"

    def do_POST(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "content_type", "said"),
    [
        (200, "text/html", "answers (HTTP 200, text/html) but is not an OTLP/HTTP trace receiver"),
        (405, "text/plain", "answers (HTTP 405, text/plain) but is not an OTLP/HTTP trace receiver"),
        (401, "application/json", "refuses the export (HTTP 401, application/json): give its credentials"),
        (503, "text/plain", None),  # busy for now: left to the exporter's retries
        (200, "application/x-protobuf", None),
    ],
)
def test_what_an_http_server_answers(status: int, content_type: str, said: str | None) -> None:
    handler = type("Handler", (_Answer,), {"status": status, "content_type": content_type})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        mistake = find_endpoint_mistake(export_target("http/protobuf", {"OTEL_EXPORTER_OTLP_ENDPOINT": url}))
    finally:
        server.shutdown()
        server.server_close()
    if said is None:
        assert mistake is None
    else:
        assert mistake is not None and said in mistake


def test_a_grpc_server_without_the_trace_service_is_named() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        target = export_target("grpc", {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
        mistake = find_endpoint_mistake(target)
    finally:
        server.stop(None)
    assert mistake is not None and "answers gRPC but has no OTLP trace service (UNIMPLEMENTED)" in mistake


def test_a_closed_port_is_left_to_the_reachability_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    target = export_target("http/protobuf", {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert find_endpoint_mistake(target) is None
