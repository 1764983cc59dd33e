"""Trajectory exporters: where finished trajectories go.

Every exporter follows one small contract (:class:`TrajectoryExporter`, a runtime-checkable protocol): the collector
asks for the *position* the next batch will be written to, commits that in its store, then calls
:meth:`TrajectoryExporter.write`. Writing the same batch again at the same position must give the same result, which
is what makes a crash mid-write harmless. Optional capabilities are protocols of their own
(:class:`GatheringExporter`, :class:`CheckedExporter`, :class:`AcknowledgingExporter`), and every exporter is built
by the one registry (:data:`REGISTRY`, :func:`make_exporter`).
"""

from .base import (
    AcknowledgingExporter,
    CheckedExporter,
    ExporterConfigError,
    GatheringExporter,
    TrajectoryExporter,
    checked_exporter,
)
from .jsonl import JsonlExporter
from .parquet import ParquetExporter
from .registry import REGISTRY, ExporterRegistry, ExporterSettings, make_exporter

__all__ = [
    "REGISTRY",
    "AcknowledgingExporter",
    "CheckedExporter",
    "ExporterConfigError",
    "ExporterRegistry",
    "ExporterSettings",
    "GatheringExporter",
    "JsonlExporter",
    "ParquetExporter",
    "TrajectoryExporter",
    "checked_exporter",
    "make_exporter",
]
