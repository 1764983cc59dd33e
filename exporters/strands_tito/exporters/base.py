"""The exporter contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class TrajectoryExporter(Protocol):
    """Writes batches of trajectory records (``TrajectoryRecord.to_dict()`` dictionaries).

    Attributes:
        name: Unique name; the collector keeps one outbox per exporter name.
    """

    name: str

    def next_position(self) -> str:
        """Where the next batch goes (opaque to the collector, which stores it before :meth:`write`)."""
        ...

    def write(self, records: Sequence[dict[str, Any]], position: str) -> None:
        """Write ``records`` at ``position`` durably, replacing whatever an interrupted earlier attempt left there."""
        ...

    def close(self) -> None:
        """Release files and connections."""
        ...


def make_exporter(spec: str) -> TrajectoryExporter:
    """An exporter from a command-line spec: ``jsonl:PATH`` or ``parquet:DIR``."""
    kind, _, target = spec.partition(":")
    if not target:
        raise ValueError(f"exporter spec {spec!r} needs a target, e.g. jsonl:out/trajectories.jsonl")
    if kind == "jsonl":
        from .jsonl import JsonlExporter

        return JsonlExporter(target)
    if kind == "parquet":
        from .parquet import ParquetExporter

        return ParquetExporter(target)
    raise ValueError(f"unknown exporter {kind!r} (known: jsonl, parquet)")
