"""Everything a user types works from built wheels, installed in a fresh virtual environment, away from the checkout.

The four wheels (strands-tito and the core, exporters and collector distributions it depends on) are built from this
checkout (hatchling, no build isolation: nothing downloaded) and installed without their dependencies into a new
venv; the dependencies come from this environment's site-packages through a plain path in a .pth file, which adds
the directory but runs none of its .pth files, so the checkout's editable installs stay out.
Each command then runs from an empty folder: ``--version``, ``demo`` (the whole path: engine, agent, collector,
check), ``inspect`` on what the demo wrote, ``engine`` and ``collect`` (started, ready, stopped), ``spool list``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from ..helpers.wheels import build_wheels, install_wheels, serving

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300
#: The folders of the repository's distributions (docs/collector.md); the full install is all four.
DISTRIBUTIONS = [ROOT / d for d in ("core", "exporters", "collector", ".")]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` folder of a fresh venv with the wheel installed."""
    base = tmp_path_factory.mktemp("wheel")
    wheels = build_wheels(DISTRIBUTIONS, base / "dist")
    return install_wheels(wheels, base / "venv", dependencies_from_here=True)


def test_no_two_distributions_ship_the_same_file(installed: Path) -> None:
    """Each installed file belongs to one distribution (pip would let one overwrite another's)."""
    records = sorted(installed.parent.glob("lib/python*/site-packages/strands_tito*.dist-info/RECORD"))
    assert len(records) == len(DISTRIBUTIONS)
    owners: dict[str, list[str]] = {}
    for record in records:
        for line in record.read_text().splitlines():
            path = line.split(",")[0]
            if ".dist-info/" not in path and not path.startswith(("..", "__pycache__")) and "/__pycache__/" not in path:
                owners.setdefault(path, []).append(record.parent.name)
    assert not {path: names for path, names in owners.items() if len(names) > 1}
    assert "strands_tito/__init__.py" in owners and "strands_tito/collector/cli.py" in owners
    # The harness's reference chat templates ship as package data (strands-tito engine|demo --chat-template).
    assert "strands_tito/testing/data/templates/manifest.json" in owners
    assert "strands_tito/testing/data/templates/deepseek-ai-DeepSeek-V3.1.jinja" in owners


def _env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STRANDS_TITO_CAPTURE", "PYTHON"))}
    return {**clean, "HF_HUB_OFFLINE": "1"}


def run(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "strands-tito"), *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT
    )


def serve_until_ready(bin_dir: Path, cwd: Path, ready: str, *args: str) -> str:
    """Start a long-running command, wait for its ready line, stop it with SIGINT; its output."""
    with serving([str(bin_dir / "strands-tito"), *args], cwd, _env(), re.escape(ready), signal.SIGINT) as served:
        pass
    return served.output


def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "python"), "-c", "import strands_tito, strands_tito.collector; print(strands_tito.__file__)"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(installed.parent) in where and str(ROOT) not in where


def test_version(installed: Path, tmp_path: Path) -> None:
    done = run(installed, tmp_path, "--version")
    assert done.returncode == 0 and re.fullmatch(r"strands-tito \d+\.\d+\.\d+\S*\n", done.stdout), done


def test_demo_then_inspect(installed: Path, tmp_path: Path) -> None:
    done = run(installed, tmp_path, "demo", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "which equals what the engine received and produced" in done.stdout
    output = tmp_path / "out" / "trajectories.jsonl"
    page = tmp_path / "view.html"
    shown = run(installed, tmp_path, "inspect", str(output), "--tokenizer", "qwen3", "--no-color", "--html", str(page))
    assert shown.returncode == 0, shown.stderr
    assert "1 trajectories, 1 complete, 0 incomplete" in shown.stdout
    assert "id='t0'" in page.read_text() and "function renderTokens" in page.read_text()  # the viewer's assets ship


def test_engine_and_collect_start_and_stop(installed: Path, tmp_path: Path) -> None:
    out = serve_until_ready(installed, tmp_path, "listening on", "engine", "--port", "0", "--script", "quickstart")
    assert "strands-tito engine listening on http://127.0.0.1:" in out
    args = ("--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--store", "store", "--jsonl", "t.jsonl")
    out = serve_until_ready(installed, tmp_path, "collector listening on", "collect", *args)
    assert "strands-tito collector listening on http://127.0.0.1:" in out


def test_spool_list(installed: Path, tmp_path: Path) -> None:
    done = run(installed, tmp_path, "spool", "--dir", str(tmp_path / "spool"), "list")
    assert done.returncode == 0 and done.stdout.startswith("nothing spooled"), done
