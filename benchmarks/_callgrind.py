"""Instruction counts of marked stretches of a worker, with valgrind's callgrind (``*_instructions.py``).

A worker calls :data:`MARK` (libc's ``getloadavg``, a cheap call outside valgrind) where a stretch to count starts
or ends; callgrind run with :func:`command` writes its counters out and resets them before each such call
(``--dump-before``), so dump ``k`` holds what ran between mark ``k - 1`` and mark ``k``. Standard library only: the
workers import this in either virtualenv.
"""

from __future__ import annotations

import os
from pathlib import Path

MARK_FUNCTION = "getloadavg"
MARK = os.getloadavg


def command(out_file: Path) -> list[str]:
    """The valgrind command line to put before a worker's, writing its dumps next to ``out_file``."""
    return ["valgrind", "--tool=callgrind", f"--dump-before={MARK_FUNCTION}", f"--callgrind-out-file={out_file}"]


def dump_totals(out_file: Path) -> list[int]:
    """Instructions of each numbered dump of one run, in order (dump 1 ran before the first mark)."""
    totals: dict[int, int] = {}
    for path in out_file.parent.glob(out_file.name + ".*"):
        suffix = path.name.rsplit(".", 1)[1]
        if suffix.isdigit():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith(("totals:", "summary:")):
                    totals[int(suffix)] = int(line.split()[1])
                    break
            else:
                raise RuntimeError(f"{path}: no totals line")
    if sorted(totals) != list(range(1, len(totals) + 1)):
        raise RuntimeError(f"{out_file}: callgrind dumps are missing (is the worker calling the mark?)")
    return [totals[k] for k in range(1, len(totals) + 1)]
