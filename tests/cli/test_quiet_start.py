"""No command and no import of strands-tito prints transformers' "PyTorch was not found" notice.

strands-tito needs no PyTorch (tokenizers and chat templates only), and the notice reads like a broken install. Each
check runs in a fresh process, as a user's shell starts it, with none of transformers' own switches for its messages
set, so only strands-tito can keep it quiet. The control shows the notice is there to hide: transformers imported on
its own still prints it in this environment (which has no PyTorch), and its other warnings still show.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
NOTICE = "PyTorch was not found"

#: A user's script: imports the providers and builds a model, as the quick start does.
USER_SCRIPT = """
from strands_tito import SGLangModel, VLLMModel
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

tokenizer = build_qwen3_tokenizer()
SGLangModel(tokenizer=tokenizer, base_url="http://127.0.0.1:1")
VLLMModel(tokenizer=tokenizer, base_url="http://127.0.0.1:1", model_id="m")
print("built")
"""


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRANSFORMERS_", "STRANDS_TITO_", "OTEL_")) and k != "PYTHONWARNINGS"
    }
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(list(command), capture_output=True, text=True, timeout=300, env=env, check=False)


@pytest.fixture(scope="module", autouse=True)
def _the_notice_is_there_to_hide() -> None:
    """Without strands-tito in between, transformers prints the notice here; otherwise no check below could fail."""
    assert importlib.util.find_spec("torch") is None
    done = _run(sys.executable, "-c", "import transformers")
    assert NOTICE in done.stderr, done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["strands-tito", "--help"],
        ["strands-tito", "engine", "--help"],
        ["strands-tito", "demo", "--help"],
        ["strands-tito", "inspect", "--help"],
        ["strands-tito", "--version"],
        ["python", "-c", "import strands_tito"],
        ["python", "-c", "import strands_tito.providers.sglang, strands_tito.providers.vllm"],
        ["python", "-c", "import strands_tito.testing.engine"],
        ["python", "-c", USER_SCRIPT],
    ],
    ids=lambda command: " ".join(command)[:60],
)
def test_quiet(command: list[str]) -> None:
    program = sys.executable if command[0] == "python" else str(BIN / command[0])
    done = _run(program, *command[1:])
    assert done.returncode == 0, done.stderr
    assert NOTICE not in done.stdout + done.stderr


def test_transformers_other_warnings_still_show() -> None:
    """Only that one notice is dropped: a warning transformers logs after strands-tito is imported still prints."""
    done = _run(
        sys.executable,
        "-c",
        "import strands_tito.providers.sglang\n"
        "from transformers.utils import logging\n"
        "logging.get_logger('transformers').warning('another warning')",
    )
    assert NOTICE not in done.stderr
    assert "another warning" in done.stderr
