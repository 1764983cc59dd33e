"""The exporter contract: one protocol every exporter follows, and one per optional capability.

The collector learns what an exporter can do from which protocol it satisfies (``isinstance`` against these
runtime-checkable protocols), never by probing for attributes; :func:`checked_exporter` refuses an object that lacks
part of the contract, or that has part of a capability but not all of it (a misspelt hook would otherwise be ignored).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from strands_tito.errors import StrandsTitoError
from strands_tito.records import ExportedRecord


class ExporterConfigError(StrandsTitoError, RuntimeError):
    """An exporter cannot work with the settings it was given, or does not follow the exporter contract (the
    collector refuses to start)."""


@runtime_checkable
class TrajectoryExporter(Protocol):
    """Writes batches of trajectory records.

    The collector writes one batch at a time per exporter and retries a failed batch (same records, same position)
    until it succeeds before it asks for the next position.

    Attributes:
        name: Unique name; the collector keeps one outbox per exporter name.
    """

    name: str

    def next_position(self) -> str:
        """Where the next batch goes (opaque to the collector, which stores it before :meth:`write`)."""
        ...

    def write(self, records: Sequence[ExportedRecord], position: str) -> None:
        """Write ``records`` at ``position`` durably, replacing whatever an interrupted earlier attempt left there."""
        ...

    def close(self) -> None:
        """Release files and connections."""
        ...


@runtime_checkable
class GatheringExporter(TrajectoryExporter, Protocol):
    """An exporter that wants bigger batches: the collector lets finished trajectories gather, durably in its store,
    for up to ``linger_seconds`` until ``batch_rows`` are waiting (Parquet: a part per minute, not per trajectory).

    Attributes:
        batch_rows: Records per batch (instead of the collector's ``batch_size``).
        linger_seconds: Longest a finished trajectory waits for others to share its batch (0: no waiting).
    """

    batch_rows: int
    linger_seconds: float


@runtime_checkable
class CheckedExporter(TrajectoryExporter, Protocol):
    """An exporter with a start-up check (e.g. a remote server that may refuse its key)."""

    def check(self) -> None:
        """Run once when the collector starts, in a worker thread.

        Raises:
            ExporterConfigError: the exporter cannot work; the collector does not start.
        """
        ...


@runtime_checkable
class AcknowledgingExporter(TrajectoryExporter, Protocol):
    """An exporter whose delivery the agent waits for (Agent Lightning: the trainer reads a rollout as soon as its
    agent exits).

    The collector holds the OTLP acknowledgement of a request carrying spans of a finished trajectory whose resource
    the exporter :meth:`acknowledges`, until :meth:`deliver` yields that trajectory, for at most ``ack_timeout``.
    It calls :meth:`deliver` instead of :meth:`~TrajectoryExporter.write` when ``ack_timeout`` is above 0.

    Attributes:
        ack_timeout: Longest hold of an acknowledgement, in seconds (0: none).
    """

    ack_timeout: float

    def acknowledges(self, resource: Mapping[str, Any]) -> bool:
        """Whether the delivery of trajectories with this resource gates the acknowledgement."""
        ...

    def deliver(self, records: Sequence[ExportedRecord], position: str) -> Iterator[str]:
        """:meth:`~TrajectoryExporter.write`, yielding each trajectory id as soon as it is delivered (or given up
        for good), so that its agent is released before the rest of the batch is done."""
        ...


CAPABILITIES: tuple[type[TrajectoryExporter], ...] = (GatheringExporter, CheckedExporter, AcknowledgingExporter)
"""The optional protocols, each all-or-nothing: an exporter has every member of one or none."""


def _members(protocol: type) -> list[str]:
    """The members a protocol declares itself (for a capability: what it adds to :class:`TrajectoryExporter`)."""
    declared = vars(protocol)
    methods = (name for name, value in declared.items() if callable(value) and not name.startswith("_"))
    return sorted({*declared.get("__annotations__", {}), *methods})


def checked_exporter(exporter: object) -> TrajectoryExporter:
    """``exporter``, once it is known to follow the contract (what the collector does with each exporter it is given).

    Raises:
        ExporterConfigError: it lacks a member of :class:`TrajectoryExporter`, or has some members of an optional
            protocol but not all (named in the message).
    """
    what = f"exporter {type(exporter).__name__}"
    missing = [m for m in _members(TrajectoryExporter) if not hasattr(exporter, m)]
    if missing:
        raise ExporterConfigError(f"{what} is not a TrajectoryExporter: it lacks {', '.join(missing)}")
    for protocol in CAPABILITIES:
        members = _members(protocol)
        present = [m for m in members if hasattr(exporter, m)]
        if present and len(present) < len(members):
            absent = [m for m in members if m not in present]
            raise ExporterConfigError(
                f"{what} has {', '.join(present)} of {protocol.__name__} but lacks {', '.join(absent)}"
            )
    assert isinstance(exporter, TrajectoryExporter)
    return exporter
