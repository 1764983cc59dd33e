"""The strands-tito collector: OTLP in, durable assembly, complete trajectories out (``strands-tito collect``).

Seams, in the order data flows (the OpenTelemetry Collector's: receivers -> processing -> exporters):

- :mod:`.receivers` (``http``, ``grpc``): protocol translation only.
- :mod:`.accept`: the one accept path both receivers share (auth, limits, decompress, decode, partial success, ack).
- :mod:`.ingest`: validation (the shared span decoder), storage and assembly; quarantine of unbuildable trajectories.
- :mod:`.store`: SQLite (WAL): open spans, finished trajectories, the export outbox and batches.
- :mod:`.delivery`: supervised export loops, and acknowledgement holds for exporters that gate them.
- :mod:`.telemetry`: metrics and the health of background tasks; :mod:`.config`: the settings, each with its option;
  :mod:`.service`: wiring and lifecycle; :mod:`.cli`: ``strands-tito collect``.

The collector never imports the agent side (Strands, transformers, providers, the engine, capture).
"""

from .config import CollectorConfig
from .service import Collector, serve
from .store import Store

__all__ = ["Collector", "CollectorConfig", "Store", "serve"]
