"""``make setup`` (scripts/bootstrap.sh, which ``make demo`` and ``make test`` run first) shows progress while it
installs, and is silent once everything is installed.

The script runs as ``make`` runs it, in a copy of the checkout whose ``.venv`` already exists (the script creates one
only when there is none) and sees this environment's packages through a plain path in a .pth file, as in
``tests/cli/test_wheel.py``: pip then installs the four distributions of the checkout, editable, offline (no index,
no build isolation), checking each dependency as it goes. Each line of output is timed as it arrives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers.wheels import venv_seeing_these_packages

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _copy_of_the_checkout(target: Path) -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _bootstrap(checkout: Path) -> tuple[int, list[tuple[float, str]]]:
    """Run the script; its exit status and each output line with the seconds since the start it arrived at."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    env |= {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    started = time.monotonic()
    process = subprocess.Popen(
        ["bash", "scripts/bootstrap.sh"],
        cwd=checkout,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = [(time.monotonic() - started, line.rstrip("\n")) for line in process.stdout]
    return process.wait(600), lines


def test_setup_shows_progress_while_it_installs_and_is_silent_when_done(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    _copy_of_the_checkout(checkout)
    venv_seeing_these_packages(checkout / ".venv")

    status, lines = _bootstrap(checkout)
    text = "\n".join(line for _, line in lines)
    assert status == 0, text
    assert lines[0][1].startswith("bootstrap: installing strands-tito and its dev tools into .venv")
    progress = [(at, line) for at, line in lines if " packages checked (" in line]
    assert progress, text
    # Progress arrives while pip works, not all at the end: the first count comes well before the install ends.
    ended = lines[-1][0]
    assert progress[0][0] < ended - 2, lines
    assert any(line.startswith("bootstrap: installed in ") for _, line in lines), text
    assert (checkout / ".venv" / "pip-install.log").read_text().count("Requirement already satisfied") > 10
    # The checkout is what got installed, editable.
    located = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "-c", "import strands_tito; print(strands_tito.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert located.stdout.strip() == str(checkout / "src" / "strands_tito" / "__init__.py")

    # Again: nothing to install, nothing printed.
    status, lines = _bootstrap(checkout)
    assert status == 0 and lines == [], lines


def test_the_progress_filter_passes_errors_on(tmp_path: Path) -> None:
    """A failed install says why: pip's errors come through, and the end of its log."""
    checkout = tmp_path / "checkout"
    _copy_of_the_checkout(checkout)
    venv_seeing_these_packages(checkout / ".venv")
    pyproject = checkout / "core" / "pyproject.toml"
    text = pyproject.read_text()
    assert "\ndependencies = [" in text
    pyproject.write_text(text.replace("\ndependencies = [", '\ndependencies = [\n    "no-such-distribution-here",', 1))
    status, lines = _bootstrap(checkout)
    text = "\n".join(line for _, line in lines)
    assert status != 0
    assert any(line.startswith("ERROR") and "no-such-distribution-here" in line for _, line in lines), text
    assert "bootstrap: the install did not work; the end of pip's output" in text
    assert not (checkout / ".venv" / ".installed").exists()
