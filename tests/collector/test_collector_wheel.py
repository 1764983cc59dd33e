"""The collector installs and runs without the agent side (issue 25).

``strands-tito-collector``'s wheel and the two it depends on (``strands-tito-core``, ``strands-tito-exporters``) are
built from this checkout and installed into a fresh virtual environment (no system or test site-packages), their
third-party dependencies from the package index (pip's cache). There, Strands, transformers, tokenizers and jinja2 do
not import; the collector runs as a real process on 127.0.0.1, the real OpenTelemetry SDK in this process sends it a
trajectory over OTLP/HTTP, and the JSONL record it writes equals the trajectory, token for token.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from strands_tito import spans as schema

from ..helpers.otlp import end_attributes, random_trajectory, read_jsonl, turn_attribute_sets

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600
#: The folders of the distributions `pip install strands-tito-collector` installs from this repository.
COLLECTOR_DISTRIBUTIONS = ("core", "exporters", "collector")

BUILD_WHEEL = (sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w")
COLLECT = (
    "--http",
    "127.0.0.1:0",
    "--grpc",
    "off",
    "--store",
    "store",
    "--jsonl",
    "out.jsonl",
    "--log-level",
    "WARNING",
)

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    """This environment without what would reach into the test's own packages or tracing settings."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STRANDS_TITO_", "PYTHON", "VIRTUAL_ENV"))
    }


@pytest.fixture(scope="module")
def collector_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh venv holding only the collector's distributions and their dependencies."""
    base = tmp_path_factory.mktemp("collector-wheel")
    dist = base / "dist"
    for folder in COLLECTOR_DISTRIBUTIONS:
        subprocess.run(
            [*BUILD_WHEEL, str(dist), str(ROOT / folder)],
            check=True,
            timeout=TIMEOUT,
            capture_output=True,
        )
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    wheels = sorted(str(w) for w in dist.glob("strands_tito_*.whl"))
    assert len(wheels) == len(COLLECTOR_DISTRIBUTIONS), wheels
    installed = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--find-links", str(dist), *wheels],
        env=_env(),
        timeout=TIMEOUT,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    return env_dir / "bin"


def python(bin_dir: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "python"), "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )


@pytest.mark.parametrize("module", ["strands", "transformers", "tokenizers", "jinja2", "strands_tito.providers"])
def test_the_agent_side_is_not_installed(collector_bin: Path, tmp_path: Path, module: str) -> None:
    done = python(collector_bin, f"import {module}", tmp_path)
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, done.stderr


def test_the_installed_collector_is_what_runs(collector_bin: Path, tmp_path: Path) -> None:
    done = python(
        collector_bin,
        "import strands_tito.collector as c, strands_tito.trajectory as t; print(c.__file__, t.__file__)",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert all(path.startswith(str(collector_bin.parent)) for path in done.stdout.split()), done.stdout
    shown = subprocess.run(
        [str(collector_bin / "python"), "-m", "strands_tito.collector", "--help"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m strands_tito.collector"), shown


@pytest.fixture
def collector_port(collector_bin: Path, tmp_path: Path) -> Iterator[int]:
    """``strands-tito-collector`` from the fresh venv, on a free port of 127.0.0.1, writing ``out.jsonl``."""
    process = subprocess.Popen(
        [str(collector_bin / "strands-tito-collector"), *COLLECT],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if match := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
            break
    else:
        pytest.fail(f"the collector exited before it was ready: {''.join(seen)}")
    try:
        yield int(match.group(1))
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(seen) + rest


def test_a_trajectory_sent_by_the_sdk_is_written_token_for_token(collector_port: int, tmp_path: Path) -> None:
    trajectory = random_trajectory(random.Random(25), turns=3)
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{collector_port}/v1/traces"))
    )
    tracer = provider.get_tracer("tests.collector.test_collector_wheel")
    for attributes in turn_attribute_sets(trajectory, model_id="test-model"):
        tracer.start_span("chat", attributes={"gen_ai.operation.name": "chat", **attributes}).end()
    tracer.start_span(schema.SPAN_END, attributes=end_attributes(trajectory)).end()
    provider.shutdown()

    deadline = time.monotonic() + 60
    while not (records := read_jsonl(tmp_path / "out.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.05)
    [record] = records
    assert record["trajectory_id"] == trajectory.trajectory_id
    assert record["complete"] is True, record["reason"]
    assert record["model_id"] == "test-model"
    assert record["token_ids"] == trajectory.token_ids
    assert record["loss_mask"] == trajectory.loss_mask
    assert record["segments"] == [[s.is_output, s.length] for s in trajectory.segments]
    # Spans carry logprobs as float32 (the first turn's prompt has none).
    sent = np.array([np.nan if v is None else v for v in trajectory.logprobs], dtype=np.float32)
    written = np.array([np.nan if v is None else v for v in record["logprobs"]], dtype=np.float32)
    assert np.array_equal(written, sent, equal_nan=True)
