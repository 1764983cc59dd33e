"""Which spans the tracer provider capture installs records: the ones capture reads, unless asked for all.

When no application made a tracer provider, capture installs one (``STRANDS_TITO_CAPTURE``, or
``opentelemetry-instrument`` without a distro). By default it records only the spans that carry trajectory data:
Strands' ``chat`` spans (one per model call, where each turn's tokens go) and strands-tito's own ``tito.*`` spans
(end signals, rewards). Strands' agent, Graph and Swarm spans (one per agent invocation or multi-agent run) are
recorded but not sampled (``RECORD_ONLY``): span processors see them, so the lineage tree knows which agent runs
inside which (:mod:`~strands_tito.capture.lineage`), and no exporter sends them. Strands' event-loop-cycle and tool
spans (one or more per model call) are not recorded: nothing of a trajectory is on them, and recording them is most of
what tracing costs a running agent (the SDK's span objects, Strands' work on ending recording spans, their export),
several times strands-tito's own share (BENCHMARKS.md, "Where the capture overhead goes"). The ``chat`` spans keep
their trace ids, so spans of one agent run still share a trace.

A sampler the user chose with ``OTEL_TRACES_SAMPLER`` is used as it is: ``parentbased_always_on`` records every span
(for a trace viewer fed by the same exporter; the deprecated ``STRANDS_TITO_SPANS=all`` does the same). A provider
the application made is never changed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from strands_tito import spans
from strands_tito.capture.lineage import is_frame_span
from strands_tito.settings import get_settings, variable

__all__ = ["ENV_SPANS", "CaptureSampler", "capture_sampler"]

ENV_SPANS = variable("spans").name  # deprecated: OTEL_TRACES_SAMPLER=parentbased_always_on does the same


class CaptureSampler(Sampler):
    """Record Strands' ``chat`` spans and strands-tito's ``tito.*`` spans; record without sampling Strands' agent,
    Graph and Swarm spans (for lineage, never exported); drop the rest.

    The decision goes by the span's name alone, not its parent's, since the ``chat`` spans' parents (Strands'
    cycle spans) are the ones dropped.
    """

    def should_sample(  # noqa: PLR0917  the OpenTelemetry Sampler interface's signature
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        """``RECORD_AND_SAMPLE`` for a span capture exports, ``RECORD_ONLY`` for one lineage reads, else ``DROP``."""
        if name == spans.SPAN_TURN or name.startswith("tito."):
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)
        if is_frame_span(name):
            return SamplingResult(Decision.RECORD_ONLY, attributes, trace_state)
        return SamplingResult(Decision.DROP, None, trace_state)

    def get_description(self) -> str:
        """The sampler's name, as the SDK reports it."""
        return "StrandsTitoCaptureSampler"


def capture_sampler() -> Sampler | None:
    """The sampler for a provider capture installs: :class:`CaptureSampler`, or None for the SDK's own choice
    (a sampler named in ``OTEL_TRACES_SAMPLER``, which the SDK builds, or the deprecated ``STRANDS_TITO_SPANS=all``).
    """
    if get_settings().spans == "all" or os.environ.get("OTEL_TRACES_SAMPLER", "").strip():
        return None
    return CaptureSampler()
