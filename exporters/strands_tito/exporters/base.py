"""The exporter contract."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from strands_tito.errors import StrandsTitoError


class ExporterConfigError(StrandsTitoError, RuntimeError):
    """An exporter cannot work with the settings it was given (the collector refuses to start)."""


class TrajectoryExporter(Protocol):
    """Writes batches of trajectory records (``TrajectoryRecord.to_dict()`` dictionaries).

    The collector writes one batch at a time per exporter and retries a failed batch (same records, same position)
    until it succeeds before it asks for the next position.

    Optional, looked up with ``getattr``: ``batch_rows`` (records per batch) and ``linger_seconds`` (how long the
    collector lets finished trajectories gather, durably in its store, until ``batch_rows`` are waiting);
    ``check()`` (run once at start-up; raises :class:`ExporterConfigError` to stop the collector); and, for an
    exporter whose delivery the agent must wait for, ``ack_timeout`` (seconds > 0), ``acknowledges(resource) ->
    bool`` and ``on_delivered`` (the collector sets it to a callable taking a trajectory id): the collector holds the
    OTLP acknowledgement of a request carrying spans of a finished trajectory whose resource the exporter
    ``acknowledges`` until the exporter reports it delivered, for at most ``ack_timeout``.

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


def make_exporter(spec: str, *, parquet_rows: int = 1000, parquet_linger: float = 30.0) -> TrajectoryExporter:
    """An exporter from a command-line spec: ``jsonl:PATH`` or ``parquet:DIR`` (parts of up to ``parquet_rows``
    records, gathered for up to ``parquet_linger`` seconds)."""
    kind, _, target = spec.partition(":")
    if not target:
        raise ValueError(f"exporter spec {spec!r} needs a target, e.g. jsonl:out/trajectories.jsonl")
    if kind == "jsonl":
        from .jsonl import JsonlExporter

        return JsonlExporter(target)
    if kind == "parquet":
        from .parquet import ParquetExporter

        return ParquetExporter(target, rows_per_part=parquet_rows, linger_seconds=parquet_linger)
    raise ValueError(f"unknown exporter {kind!r} (known: jsonl, parquet)")
