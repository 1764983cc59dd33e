"""Parquet: one file per batch in a directory (readable as one dataset by pandas, pyarrow and `datasets`)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strands_tito.errors import MissingDependencyError
from strands_tito.records import RECORD_FIELDS, RECORD_KEYS, ExportedRecord, ParquetType

from .base import ExporterConfigError

COLUMNS = RECORD_KEYS
"""The columns of every part: the record's fields (:data:`strands_tito.records.RECORD_FIELDS`), in that order."""


ROWS_PER_PART = 1000
"""Records per part file (a part is written when this many are waiting, or after :data:`LINGER_SECONDS`)."""
LINGER_SECONDS = 30.0
"""Longest a finished trajectory waits (durably, in the collector's store) for more to share its part."""


class ParquetExporter:
    """Writes batches of up to ``rows_per_part`` records as ``part-NNNNNNNN.parquet``; the position is the part's name.

    The collector gathers a part's records for up to ``linger_seconds`` (they wait in its store, so nothing is lost),
    so a steady trickle of trajectories gives a part a minute or so, not a part per trajectory; at shutdown what is
    waiting is written as a smaller part. The directory is scanned once, at start-up, for the next part number.

    One column per field of the record, typed as :data:`~strands_tito.records.RECORD_FIELDS` says; nested fields
    (turns, resource, tool-parse errors, calls, prefix report) are stored as JSON strings so every part has the same
    schema.
    A part is written to a temporary file and renamed into place, so readers never see half a file.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        name: str | None = None,
        *,
        rows_per_part: int = ROWS_PER_PART,
        linger_seconds: float = LINGER_SECONDS,
    ) -> None:
        try:
            import pyarrow  # noqa: F401  (fail at start-up, not at the first batch, when pyarrow is missing)
        except ImportError as e:
            missing = MissingDependencyError("Parquet output", "pyarrow", "parquet", "strands-tito-collector")
            raise ExporterConfigError(str(missing)) from e

        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExporterConfigError(f"cannot write Parquet parts to {self.directory}: {e}") from e
        self.name = name or f"parquet:{self.directory}"
        self.batch_rows = rows_per_part
        self.linger_seconds = linger_seconds
        numbers = [_number(p.name) for p in self.directory.glob("part-*.parquet")]
        self._next = max(numbers, default=-1) + 1

    def next_position(self) -> str:
        """The next unused part number."""
        position = f"part-{self._next:08d}.parquet"
        self._next += 1
        return position

    def write(self, records: Sequence[ExportedRecord], position: str) -> None:
        """Write the batch as one part file (atomically replacing a part left by an interrupted attempt)."""
        import pyarrow.parquet as pq

        table = _table(records)
        target = self.directory / position
        # Dot-prefixed: dataset readers (pyarrow, pandas, datasets) skip it while it is being written.
        temporary = self.directory / f".{position}.tmp"
        pq.write_table(table, temporary)
        with temporary.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)
        self._next = max(self._next, _number(position) + 1)  # a batch from before a restart, at its old position

    def close(self) -> None:
        """Nothing stays open between batches."""


def _number(part: str) -> int:
    return int(part.split("-")[1].split(".")[0])


def _column(kind: ParquetType, values: list[Any]) -> Any:
    """One column as a pyarrow array, from the records' values of one field."""
    import pyarrow as pa

    if kind == "json":
        return pa.array([json.dumps(v, separators=(",", ":")) for v in values], pa.string())
    if kind == "segments":
        struct = pa.struct([("is_output", pa.bool_()), ("length", pa.int32())])
        return pa.array([[{"is_output": bool(s[0]), "length": s[1]} for s in v] for v in values], pa.list_(struct))
    scalar = {"string": pa.string(), "bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64()}
    if kind in scalar:
        return pa.array(values, scalar[kind])
    item = {
        "list<int32>": pa.int32(),
        "list<int8>": pa.int8(),
        "list<float64>": pa.float64(),
        "list<string>": pa.string(),
    }
    return pa.array(values, pa.list_(item[kind]))


def _table(records: Sequence[ExportedRecord]) -> Any:
    """The batch as one pyarrow table, one column per record field."""
    import pyarrow as pa

    return pa.table({f.name: _column(f.parquet, [r.get(f.name, f.default) for r in records]) for f in RECORD_FIELDS})
