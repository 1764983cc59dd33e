"""JSONL: one trajectory per line, appended to one file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strands_tito.records import jsonl_bytes


class JsonlExporter:
    """Appends records to a JSON Lines file.

    The position of a batch is the file size before it. Writing truncates the file there first, so a batch cut
    short by a crash is replaced, never duplicated; nothing past the last acknowledged batch survives a restart.
    """

    def __init__(self, path: str | os.PathLike[str], name: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        self.name = name or f"jsonl:{self.path}"

    def next_position(self) -> str:
        """The current end of the file."""
        return str(self.path.stat().st_size)

    def write(self, records: Sequence[dict[str, Any]], position: str) -> None:
        """Write the batch at byte offset ``position`` and fsync."""
        data = jsonl_bytes(records)
        with self.path.open("r+b") as f:
            f.truncate(int(position))
            f.seek(int(position))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        """Nothing stays open between batches."""
