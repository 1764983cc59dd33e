"""Parquet: one file per batch in a directory (readable as one dataset by pandas, pyarrow and `datasets`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLUMNS = (
    "trajectory_id",
    "complete",
    "reason",
    "model_id",
    "reward",
    "token_ids",
    "loss_mask",
    "logprobs",
    "segments",
    "trace_ids",
    "resource",
    "turns",
    "tool_parse_errors",
    "rewards",
    "calls",
    "prefix_report",
    "prefix_consistent",
    "image_data",
)


class ParquetExporter:
    """Writes each batch as ``part-NNNNNNNN.parquet``; the position is the part's file name.

    Nested fields (turns, resource, tool-parse errors, calls, prefix report) are stored as JSON strings so every part
    has the same schema.
    A part is written to a temporary file and renamed into place, so readers never see half a file.
    """

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        import pyarrow  # noqa: F401  (fail at start-up, not at the first batch, when pyarrow is missing)

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name or f"parquet:{self.directory}"

    def next_position(self) -> str:
        """The next unused part number."""
        numbers = [int(p.stem.split("-")[1]) for p in self.directory.glob("part-*.parquet")]
        return f"part-{max(numbers, default=-1) + 1:08d}.parquet"

    def write(self, records: Sequence[dict[str, Any]], position: str) -> None:
        """Write the batch as one part file (atomically replacing a part left by an interrupted attempt)."""
        import json

        import pyarrow as pa
        import pyarrow.parquet as pq

        def as_json(value: Any) -> str:
            return json.dumps(value, separators=(",", ":"))

        columns = {
            "trajectory_id": pa.array([r["trajectory_id"] for r in records], pa.string()),
            "complete": pa.array([r["complete"] for r in records], pa.bool_()),
            "reason": pa.array([r.get("reason") for r in records], pa.string()),
            "model_id": pa.array([r.get("model_id") for r in records], pa.string()),
            "reward": pa.array([r.get("reward") for r in records], pa.float64()),
            "token_ids": pa.array([r["token_ids"] for r in records], pa.list_(pa.int32())),
            "loss_mask": pa.array([r["loss_mask"] for r in records], pa.list_(pa.int8())),
            "logprobs": pa.array([r["logprobs"] for r in records], pa.list_(pa.float64())),
            "segments": pa.array(
                [[{"is_output": bool(s[0]), "length": s[1]} for s in r["segments"]] for r in records],
                pa.list_(pa.struct([("is_output", pa.bool_()), ("length", pa.int32())])),
            ),
            "trace_ids": pa.array([r.get("trace_ids", []) for r in records], pa.list_(pa.string())),
            "resource": pa.array([as_json(r.get("resource", {})) for r in records], pa.string()),
            "turns": pa.array([as_json(r.get("turns", [])) for r in records], pa.string()),
            "tool_parse_errors": pa.array([as_json(r.get("tool_parse_errors", [])) for r in records], pa.string()),
            "rewards": pa.array([r.get("rewards", []) for r in records], pa.list_(pa.float64())),
            # Stock (OpenAI-compatible) agents: every call exactly, and whether consecutive calls shared a prefix.
            "calls": pa.array([as_json(r.get("calls", [])) for r in records], pa.string()),
            "prefix_report": pa.array([as_json(r.get("prefix_report", [])) for r in records], pa.string()),
            "prefix_consistent": pa.array([r.get("prefix_consistent") for r in records], pa.bool_()),
            # Vision-language agents: every prompt image in order as a base64 data URL (turns[k]["images"] per turn).
            "image_data": pa.array([r.get("image_data", []) for r in records], pa.list_(pa.string())),
        }
        table = pa.table({name: columns[name] for name in COLUMNS})
        target = self.directory / position
        # Dot-prefixed: dataset readers (pyarrow, pandas, datasets) skip it while it is being written.
        temporary = self.directory / f".{position}.tmp"
        pq.write_table(table, temporary)
        with temporary.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)

    def close(self) -> None:
        """Nothing stays open between batches."""
