"""The strands-tito collector: OTLP in, durable assembly, complete trajectories out (``strands-tito collect``)."""

from .service import Collector, CollectorConfig, serve
from .store import Store

__all__ = ["Collector", "CollectorConfig", "Store", "serve"]
