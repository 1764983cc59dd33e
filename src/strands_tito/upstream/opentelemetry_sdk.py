"""Everything strands-tito uses of the OpenTelemetry SDK (``opentelemetry-sdk``) that is not its public API.

Checked against opentelemetry-sdk 1.45.0, 1.45.1 and 1.45.2 (``CHECKED``), read in their
``opentelemetry/sdk/trace/__init__.py``:

* ``Span._limits`` and ``TracerProvider._span_limits``: the :class:`SpanLimits` a span enforces and a provider gives
  its spans. The SDK has no public getter; capture reads them to refuse limits that would evict or cut token data
  (:func:`limits_of_span`, :func:`limits_of_provider`).
* ``opentelemetry.sdk._shared_internal``: the module whose logger reports the batch processor's failed exports
  (:data:`BATCH_EXPORT_LOGGER`), quieted while the endpoint is known to be down.

Nothing is patched and no attribute is written onto SDK objects.
"""

from __future__ import annotations

import importlib.util

from opentelemetry.sdk.trace import Span, SpanLimits, TracerProvider

from strands_tito.upstream import UpstreamChangedError

__all__ = ["BATCH_EXPORT_LOGGER", "CHECKED", "DISTRIBUTION", "limits_of_provider", "limits_of_span", "verify"]

DISTRIBUTION = "opentelemetry-sdk"
#: The versions whose source this module was checked against.
CHECKED = ">=1.45.0,<1.46"

#: The logger of the SDK's batch processor (its export failures); a module name, not an API.
BATCH_EXPORT_LOGGER = "opentelemetry.sdk._shared_internal"


def _changed(what: str) -> UpstreamChangedError:
    return UpstreamChangedError(DISTRIBUTION, CHECKED, what)


def limits_of_span(span: object) -> SpanLimits | None:
    """The limits an SDK span enforces on its attributes (None for a span of another implementation).

    Raises:
        UpstreamChangedError: an SDK span that no longer keeps them where it did.
    """
    if not isinstance(span, Span):
        return None
    limits = getattr(span, "_limits", None)
    if not isinstance(limits, SpanLimits):
        raise _changed("Span._limits is not the span's SpanLimits")
    return limits


def limits_of_provider(provider: TracerProvider) -> SpanLimits:
    """The limits ``provider`` gives the spans it starts.

    Raises:
        UpstreamChangedError: the provider no longer keeps them where it did.
    """
    limits = getattr(provider, "_span_limits", None)
    if not isinstance(limits, SpanLimits):
        raise _changed("TracerProvider._span_limits is not the provider's SpanLimits")
    return limits


def verify() -> None:
    """Check that everything this module relies on is where it was in the checked versions.

    Raises:
        UpstreamChangedError: naming what moved.
    """
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    limits = SpanLimits(max_span_attributes=1000)
    provider = TracerProvider(sampler=ALWAYS_ON, span_limits=limits, shutdown_on_exit=False)
    try:
        if limits_of_provider(provider) is not limits:
            raise _changed("TracerProvider._span_limits is not the span_limits it was given")
        span = provider.get_tracer(__name__).start_span("strands-tito upstream check")
        span.end()
        if limits_of_span(span) is not limits:
            raise _changed("Span._limits is not the provider's span limits")
    finally:
        provider.shutdown()
    if importlib.util.find_spec(BATCH_EXPORT_LOGGER) is None:
        raise _changed(f"there is no module {BATCH_EXPORT_LOGGER} (whose logger reports failed batch exports)")
