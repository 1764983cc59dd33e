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
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from strands_tito import spans as schema

from ..helpers.otlp import end_attributes, random_trajectory, read_jsonl, turn_attribute_sets
from ..helpers.wheels import build_wheels, install_wheels, serving

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 600
#: The folders of the distributions `pip install strands-tito-collector` installs from this repository.
COLLECTOR_DISTRIBUTIONS = ("core", "exporters", "collector")

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
    wheels = build_wheels([ROOT / folder for folder in COLLECTOR_DISTRIBUTIONS], base / "dist")
    return install_wheels(wheels, base / "venv", dependencies_from_here=False, env=_env())


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
    command = [str(collector_bin / "strands-tito-collector"), *COLLECT]
    with serving(command, tmp_path, _env(), r"listening on http://127\.0\.0\.1:(\d+)") as served:
        yield int(served.ready.group(1))


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
