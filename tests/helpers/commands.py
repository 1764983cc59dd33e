"""Running ``strands-tito`` as a user does, in a fresh interpreter, and checking that it fails in one clear line."""

from __future__ import annotations

import os
import subprocess
import sys

TIMEOUT = 120


def strands_tito(
    *args: str, hide: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``strands-tito ARGS`` in a fresh interpreter; ``hide`` makes that top-level package unimportable, as when its
    extra is not installed."""
    hiding = f"sys.modules[{hide!r}] = None; " if hide else ""
    code = f"import sys; {hiding}from strands_tito.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )


def assert_one_line(done: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("strands-tito")]
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
