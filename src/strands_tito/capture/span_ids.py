"""Span and trace ids for the tracer provider capture installs, drawn without touching the ``random`` module.

OpenTelemetry's default ``RandomIdGenerator`` draws from the ``random`` module's global state: two draws for every
span. With capture on, that moves an experiment's seeded ``random`` stream by a number of draws that depends on how
many spans were made and on which thread ran first (capture's own thread ends trajectories), so the same seed gives
different episodes with tracing on and off. :class:`SystemRandomIdGenerator` reads the operating system's
generator instead: no state to share, and distinct in forked workers (a private ``random.Random`` would repeat its
parent's ids after a fork).

A provider the application makes keeps its own generator; pass ``id_generator=SystemRandomIdGenerator()`` to it for
the same guarantee.
"""

from __future__ import annotations

import random

from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import INVALID_SPAN_ID, INVALID_TRACE_ID

__all__ = ["SystemRandomIdGenerator"]


class SystemRandomIdGenerator(IdGenerator):
    """Random 64-bit span ids and 128-bit trace ids from ``random.SystemRandom`` (never the global ``random``)."""

    def __init__(self) -> None:
        self._random = random.SystemRandom()

    def generate_span_id(self) -> int:
        """A random span id, never the invalid one (0)."""
        span_id = self._random.getrandbits(64)
        while span_id == INVALID_SPAN_ID:
            span_id = self._random.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        """A random trace id, never the invalid one (0)."""
        trace_id = self._random.getrandbits(128)
        while trace_id == INVALID_TRACE_ID:
            trace_id = self._random.getrandbits(128)
        return trace_id
