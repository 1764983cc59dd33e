"""Wheels built from this checkout, installed into a fresh virtual environment, and long-running commands from it."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: Seconds a build, an install or a stop may take.
TIMEOUT = 600


def build_wheels(folders: Sequence[Path], dist: Path) -> list[Path]:
    """Each distribution folder's wheel, written to ``dist`` (hatchling, no build isolation: nothing downloaded)."""
    for folder in folders:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), folder],
            check=True,
            timeout=TIMEOUT,
            capture_output=True,
        )
    wheels = sorted(dist.glob("strands_tito*.whl"))
    assert len(wheels) == len(folders), wheels
    return wheels


def venv_seeing_these_packages(env_dir: Path) -> None:
    """A fresh venv at ``env_dir`` whose site-packages also holds this environment's, through a plain path in a .pth
    file (it adds the directory but runs none of its .pth files, so the checkout's editable installs stay out)."""
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    site = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "_dependencies_from_the_test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def install_wheels(
    wheels: Sequence[Path], env_dir: Path, *, dependencies_from_here: bool, env: Mapping[str, str] | None = None
) -> Path:
    """A fresh venv at ``env_dir`` holding ``wheels``; its ``bin`` folder.

    ``dependencies_from_here``: the wheels are installed without their dependencies, which come from this
    environment's site-packages through a plain path in a .pth file (it adds the directory but runs none of its .pth
    files, so the checkout's editable installs stay out). Otherwise the venv sees nothing of this environment and pip
    installs the dependencies from the package index (its cache), with ``env``.
    """
    python = str(env_dir / "bin" / "python")
    command = [python, "-m", "pip", "install", "-q"]
    if dependencies_from_here:
        venv_seeing_these_packages(env_dir)
        command += ["--no-deps", "--no-index"]
    else:
        venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
        command += ["--find-links", str(wheels[0].parent)]
    done = subprocess.run(
        [*command, *map(str, wheels)], env=env, timeout=TIMEOUT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return env_dir / "bin"


@dataclass
class Served:
    """A long-running command that printed its ready line: the line's match, and all it printed once stopped."""

    ready: re.Match[str]
    seen: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.seen)


@contextlib.contextmanager
def serving(
    command: Sequence[str], cwd: Path, env: Mapping[str, str], ready: str, stop: int = signal.SIGTERM
) -> Iterator[Served]:
    """Start ``command``, wait for a line matching ``ready``, yield; then stop it with ``stop`` and require a clean
    exit (status 0)."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    seen: list[str] = []
    try:
        for line in process.stdout:
            seen.append(line)
            if match := re.search(ready, line):
                break
        else:
            pytest.fail(f"{command[0]} exited before it was ready: {''.join(seen)}")
        served = Served(match, seen)
        yield served
    finally:
        process.send_signal(stop)
        rest, _ = process.communicate(timeout=60)
        seen.append(rest)
    assert process.returncode == 0, "".join(seen)
