"""The exporter registry: every exporter the collector runs is built here, from a spec ``KIND:TARGET``.

Built-in kinds: ``jsonl:PATH``, ``parquet:DIR`` and ``agentlightning:URL``. Each kind's factory takes the target and
the :class:`ExporterSettings`; :meth:`ExporterRegistry.register` adds a kind, and what a factory builds is checked
against the exporter contract (:func:`~.base.checked_exporter`) before the collector sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .base import ExporterConfigError, TrajectoryExporter, checked_exporter


@dataclass(frozen=True)
class ExporterSettings:
    """What the built-in exporters are configured with besides their target (the collector's options).

    Attributes:
        jsonl_shared: JSONL files are shared with other processes' appends (see :class:`~.jsonl.JsonlExporter`).
        parquet_rows: Records per Parquet part.
        parquet_linger: Longest a finished trajectory waits for others to share its Parquet part (seconds).
        agl_key: The Agent Lightning server's key.
        agl_journal: The Agent Lightning exporter's progress journal (SQLite, next to the collector's store).
        agl_ack_timeout: Longest hold of an agent's acknowledgement until its rollout's events are on the server.
        agl_model: Model name to report to Agent Lightning instead of each record's ``model_id``.
    """

    jsonl_shared: bool = False
    parquet_rows: int = 1000
    parquet_linger: float = 30.0
    agl_key: str | None = field(default=None, repr=False)
    agl_journal: Path = Path(".strands-tito/agentlightning.db")
    agl_ack_timeout: float = 8.0
    agl_model: str | None = None


ExporterFactory = Callable[[str, ExporterSettings], object]
"""Builds an exporter from its target and the settings (checked against the contract after)."""


class ExporterRegistry:
    """Exporter kinds by name, and the one place exporters are built."""

    def __init__(self) -> None:
        self._factories: dict[str, ExporterFactory] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The registered kinds, in registration order."""
        return tuple(self._factories)

    def register(self, kind: str, factory: ExporterFactory) -> None:
        """Add a kind (``KIND:TARGET`` specs then build with ``factory``).

        Raises:
            ValueError: the kind is taken, or is not a plain word.
        """
        if not kind.isidentifier() or kind in self._factories:
            raise ValueError(f"exporter kind {kind!r} is taken or not a plain word")
        self._factories[kind] = factory

    def build(self, spec: str, settings: ExporterSettings | None = None) -> TrajectoryExporter:
        """The exporter a spec names.

        Raises:
            ValueError: the spec has no target or names an unknown kind.
            ExporterConfigError: the exporter cannot work with its settings, or what the factory built does not
                follow the exporter contract.
        """
        kind, _, target = spec.partition(":")
        if not target:
            raise ValueError(f"exporter spec {spec!r} needs a target, e.g. jsonl:out/trajectories.jsonl")
        factory = self._factories.get(kind)
        if factory is None:
            raise ValueError(f"unknown exporter {kind!r} (known: {', '.join(self._factories)})")
        return checked_exporter(factory(target, settings or ExporterSettings()))


def _jsonl(target: str, settings: ExporterSettings) -> TrajectoryExporter:
    from .jsonl import JsonlExporter

    return JsonlExporter(target, shared=settings.jsonl_shared)


def _parquet(target: str, settings: ExporterSettings) -> TrajectoryExporter:
    from .parquet import ParquetExporter

    return ParquetExporter(target, rows_per_part=settings.parquet_rows, linger_seconds=settings.parquet_linger)


def _agentlightning(target: str, settings: ExporterSettings) -> TrajectoryExporter:
    from .agentlightning import AgentLightningExporter

    return AgentLightningExporter(
        target,
        settings.agl_key,
        settings.agl_journal,
        ack_timeout=settings.agl_ack_timeout,
        model=settings.agl_model,
    )


REGISTRY = ExporterRegistry()
"""The registry the collector builds its exporters from."""
REGISTRY.register("jsonl", _jsonl)
REGISTRY.register("parquet", _parquet)
REGISTRY.register("agentlightning", _agentlightning)


def make_exporter(spec: str, settings: ExporterSettings | None = None) -> TrajectoryExporter:
    """An exporter from a spec (``jsonl:PATH``, ``parquet:DIR``, ``agentlightning:URL``), built by :data:`REGISTRY`."""
    return REGISTRY.build(spec, settings)


__all__ = [
    "REGISTRY",
    "ExporterConfigError",
    "ExporterFactory",
    "ExporterRegistry",
    "ExporterSettings",
    "make_exporter",
]
