"""Trajectory exporters: where finished trajectories go.

Every exporter follows one small contract (:class:`TrajectoryExporter`): the collector asks for the *position* the
next batch will be written to, commits that in its store, then calls :meth:`TrajectoryExporter.write`. Writing the
same batch again at the same position must give the same result, which is what makes a crash mid-write harmless.
"""

from .base import ExporterConfigError, TrajectoryExporter, make_exporter
from .jsonl import JsonlExporter
from .parquet import ParquetExporter

__all__ = ["ExporterConfigError", "JsonlExporter", "ParquetExporter", "TrajectoryExporter", "make_exporter"]
