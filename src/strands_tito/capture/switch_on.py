"""Trace capture switched on by environment variables, no code change.

Two ways in, one mechanism:

* ``opentelemetry-instrument python agent.py`` loads :class:`TitoInstrumentor` from the ``opentelemetry_instrumentor``
  entry point. With a distro (``opentelemetry-distro``) its configurator has already built the SDK tracer provider
  from the standard ``OTEL_*`` variables; the instrumentor checks its limits and attaches to it. Without one, the
  instrumentor installs an SDK provider itself (lazily, see below) exporting with the OTLP exporter that
  ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` picks (``http/protobuf`` by default, or ``grpc``).
* ``STRANDS_TITO_CAPTURE`` (read at interpreter start by ``strands_tito_startup``, from the ``.pth`` file the package
  installs): ``otlp`` (or ``1``) exports spans with the OTLP exporter the standard ``OTEL_EXPORTER_OTLP_*`` variables
  configure; ``jsonl:PATH`` writes reassembled trajectories to ``PATH`` in the process
  (:class:`~strands_tito.capture.recorder.TrajectorySpanProcessor`); both may be given, comma-separated.

Neither replaces a tracer provider the application makes itself (``StrandsTelemetry()``): no provider is installed at
interpreter start. When Strands first creates its tracer (the first ``Agent``, ``Swarm`` or ``Graph``), capture
attaches its span processors to the global SDK provider if there is one by then, and installs one otherwise. The
application's own exporters keep receiving their spans; strands-tito's go where ``STRANDS_TITO_CAPTURE`` says.

At exit :func:`~strands_tito.capture.recorder.shutdown_capture` ends every open trajectory and flushes; it is registered
with ``atexit`` once per process, moved after each provider it flushes, so (last in, first out) it runs before those
providers' own shutdown. Settings that would lose data (span limits, an unknown value, an unsupported protocol) stop
the process at start-up with a message naming the variable to change.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from strands_tito.capture.lineage import attach_span_tree
from strands_tito.capture.recorder import (
    ENV_CAPTURE,
    CaptureConfigError,
    TrajectorySpanProcessor,
    add_processors,
    agentlightning_identity,
    check_span_limits,
    register_exit_handler,
)
from strands_tito.capture.sampler import capture_sampler
from strands_tito.capture.span_ids import SystemRandomIdGenerator
from strands_tito.settings import ON_VALUES, Settings, capture_off, get_settings, reload_settings, variable
from strands_tito.upstream import UpstreamChangedError, strands_sdk

logger = logging.getLogger(__name__)

EXIT_CONFIG_ERROR = 78  # EX_CONFIG (sysexits.h)
# Exporters of the SDK configurator (OTEL_TRACES_EXPORTER) that already send OTLP.
_OTLP_EXPORTER_NAMES = {"otlp", "otlp_proto_http", "otlp_proto_grpc"}


@dataclass(frozen=True)
class CaptureRequest:
    """What ``STRANDS_TITO_CAPTURE`` asks for."""

    otlp: bool = False
    jsonl: tuple[Path, ...] = ()
    enabled: bool = False

    def __bool__(self) -> bool:
        return self.enabled or self.otlp or bool(self.jsonl)

    def merged(self, other: CaptureRequest) -> CaptureRequest:
        """Both requests together."""
        return CaptureRequest(
            self.otlp or other.otlp, tuple(dict.fromkeys((*self.jsonl, *other.jsonl))), self.enabled or other.enabled
        )


ENV_OUTPUT = variable("output").name  # deprecated: STRANDS_TITO_CAPTURE=jsonl:PATH
_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def _settings_of(environ: Mapping[str, str] | None) -> Settings:
    return get_settings() if environ is None else Settings.from_environ(environ)


def parse_capture(value: str, environ: Mapping[str, str] | None = None) -> CaptureRequest:
    """Read a ``STRANDS_TITO_CAPTURE`` value (with the deprecated ``STRANDS_TITO_OUTPUT`` of the settings, or of
    ``environ`` when given).

    ``1`` (or ``true``/``on``/``yes``) switches capture on: spans are exported over OTLP when an endpoint is set
    (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). ``otlp`` exports even to the default
    endpoint, ``jsonl:PATH`` makes the process assemble its own trajectories into that JSONL file; items combine with
    commas. ``0`` or empty: off.

    Raises:
        CaptureConfigError: an unknown item, or an empty ``jsonl:`` path.
    """
    env = os.environ if environ is None else environ
    items = [item.strip() for item in value.split(",") if item.strip()]
    if not items or (len(items) == 1 and capture_off(items[0])):
        return CaptureRequest()
    otlp, jsonl = False, []
    for item in items:
        lowered = item.lower()
        if lowered == "otlp":
            otlp = True
        elif lowered in ON_VALUES:
            otlp = otlp or any(env.get(name, "").strip() for name in _ENDPOINT_VARIABLES)
        elif lowered.startswith("jsonl:") and item[len("jsonl:") :].strip():
            jsonl.append(item[len("jsonl:") :].strip())
        else:
            raise CaptureConfigError(
                f"{ENV_CAPTURE}={value!r}: cannot read {item!r}; use 1 (or otlp, jsonl:PATH, comma-separated), "
                "or 0 for off"
            )
    output = _settings_of(environ).output
    if output:
        jsonl.append(output)
    # Relative paths are relative to the directory the process started in.
    paths = (Path(os.path.abspath(os.path.expanduser(p))) for p in jsonl)
    return CaptureRequest(otlp, tuple(dict.fromkeys(paths)), enabled=True)


ENV_SPAN_CONTENT = variable("span_content").name  # deprecated: set OTEL_SEMCONV_STABILITY_OPT_IN yourself
SEMCONV_OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
#: Strands' own redaction switch with an empty allow-list: every message-content attribute and event value
#: (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``, tool arguments and
#: results) becomes ``[REDACTED]``. The token ids on the chat spans already hold what the model saw and produced.
#: With it, the latest GenAI conventions recorded as span attributes: Strands still serializes the content before
#: redacting it, but once per span (one JSON of the messages) instead of once per message plus one span event each;
#: the cheapest of its settings (BENCHMARKS.md, "Trace capture cost"). The collector reads no Strands attribute.
CONTENT_OFF = "gen_ai_latest_experimental,gen_ai_span_attributes_only,gen_ai_unredacted_attributes="


def keep_content_off_spans(environ: dict[str, str] | None = None) -> bool:
    """Make Strands leave the conversation text off its spans while capture is on, unless asked to keep it.

    Sets ``OTEL_SEMCONV_STABILITY_OPT_IN`` to Strands' redaction token, only when the variable is unset or empty (a
    value the user chose is left as it is) and the deprecated ``STRANDS_TITO_SPAN_CONTENT`` is not on (in the settings,
    or in ``environ`` when given). Strands reads the variable
    once, when it creates its tracer (the first ``Agent``); if that happened already, the setting comes too late and a
    warning says so. Returns whether the variable was set.
    """
    env = os.environ if environ is None else environ
    if _settings_of(environ).span_content or env.get(SEMCONV_OPT_IN, "").strip():
        return False
    env[SEMCONV_OPT_IN] = CONTENT_OFF
    try:
        late = environ is None and strands_sdk.tracer_created()
    except UpstreamChangedError as error:  # only a warning depends on it: capture still switches on
        logger.warning("cannot tell whether Strands created its tracer already: %s", error)
        late = False
    if late:
        logger.warning(
            "Strands created its tracer before capture was switched on; its spans keep the conversation text "
            "(switch capture on before the first Agent, or set %s=%s yourself)",
            SEMCONV_OPT_IN,
            CONTENT_OFF,
        )
    return True


def otlp_protocol() -> str:
    """The OTLP protocol the standard variables choose for traces (``http/protobuf`` unless set).

    Raises:
        CaptureConfigError: a protocol the Python SDK cannot export with.
    """
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = os.environ.get(name, "").strip().lower()
        if value:
            if value not in ("http/protobuf", "grpc"):
                raise CaptureConfigError(f"{name}={value!r} is not supported for traces; use http/protobuf or grpc")
            return value
    return "http/protobuf"


def otlp_exporter() -> SpanExporter:
    """The OTLP span exporter the standard ``OTEL_EXPORTER_OTLP_*`` variables describe (endpoint, headers, ...)."""
    if otlp_protocol() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError as e:
            raise CaptureConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc installed"
            ) from e
        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


def otlp_endpoint() -> str:
    """Where the standard variables send traces (for the spool's key: spans wait for the collector they were for)."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        value = os.environ.get(name, "").strip()
        if value:
            return f"{otlp_protocol()} {value}"
    return f"{otlp_protocol()} default"


def otlp_processor() -> SpanProcessor:
    """The OTLP span processor capture adds: strands-tito spans through the disk spool (``STRANDS_TITO_SPOOL=0``:
    the SDK's plain ``BatchSpanProcessor``, which drops spans when its queue is full), other spans batched as usual.

    Raises:
        CaptureConfigError: ``OTEL_BSP_SCHEDULE_DELAY`` is not a positive integer, or the spool directory cannot be
            used.
    """
    from strands_tito.capture.endpoint_check import GivingUpExporter, export_target, watch_endpoint
    from strands_tito.capture.spool import ENV_SPOOL_DIR, Spool, default_spool_root, spool_key
    from strands_tito.capture.spool_processor import OtlpCaptureProcessor, SpoolingSpanProcessor

    settings = get_settings()
    if not settings.spool:
        return BatchSpanProcessor(otlp_exporter())
    service = os.environ.get("OTEL_SERVICE_NAME", "").strip() or "unknown_service"
    # The standard variable of the SDK's batch processor, in milliseconds (its default, 5 s, here too).
    delay = os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "").strip() or "5000"
    if not delay.isdigit() or int(delay) <= 0:
        raise CaptureConfigError(f"OTEL_BSP_SCHEDULE_DELAY={delay!r} is not a positive number of milliseconds")
    try:
        spool = Spool(default_spool_root() / spool_key(service, otlp_endpoint()))
    except (ValueError, OSError) as e:
        raise CaptureConfigError(f"trace spool: {e} ({ENV_SPOOL_DIR})") from e
    watch_endpoint(export_target(otlp_protocol()), spool.parent)
    spooling = SpoolingSpanProcessor(
        GivingUpExporter(otlp_exporter()),
        spool,
        schedule_delay=int(delay) / 1000,
        max_bytes=settings.spool_max_bytes,
        queue_spans=settings.spool_queue_spans,
        queue_bytes=settings.spool_queue_bytes,
    )
    return OtlpCaptureProcessor(spooling, BatchSpanProcessor(GivingUpExporter(otlp_exporter())))


def _configurator_exports_otlp() -> bool:
    names = {n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return bool(names & _OTLP_EXPORTER_NAMES)


class _Switch:
    """Process-wide capture state: what was asked for, and the providers capture is attached to."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.request = CaptureRequest()
        self.export_own_provider = False  # an installed provider exports OTLP (opentelemetry-instrument, no distro)
        self.active = False
        self.hooked = False
        self.processors: dict[str, SpanProcessor] = {}
        self.attached: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
        self.own: weakref.WeakSet[TracerProvider] = weakref.WeakSet()
        self.otlp_covered: weakref.WeakSet[TracerProvider] = weakref.WeakSet()

    def enable(self, request: CaptureRequest, *, export_own_provider: bool = False, otlp_covered: bool = False) -> None:
        # What a provider built from the environment would enforce; an app-made provider is checked on attach.
        try:
            limits = SpanLimits()
        except ValueError as e:  # a limit variable that is not a number
            raise CaptureConfigError(f"span limits: {e}") from e
        check_span_limits(limits)
        if request.otlp or export_own_provider:
            otlp_protocol()
        keep_content_off_spans()
        # Stock agents too: Strands' OpenAIModel against vLLM/SGLang records each call's token ids.
        from strands_tito.capture.openai import instrument_openai_model

        instrument_openai_model()
        with self.lock:
            self.request = self.request.merged(request)
            self.export_own_provider = self.export_own_provider or export_own_provider
            self.active = True
            provider = trace.get_tracer_provider()
            if isinstance(provider, TracerProvider):
                if otlp_covered:
                    self.otlp_covered.add(provider)
                self.attach(provider)
            else:
                self.hook_strands()

    def disable(self) -> None:
        """No further attaching or installing (processors already attached stay: the SDK cannot remove them)."""
        with self.lock:
            self.active = False

    def hook_strands(self) -> None:
        """Run :meth:`ensure_provider` when Strands creates its tracer, i.e. when the first agent is constructed.

        ``strands.telemetry.tracer.Tracer`` is a process singleton that looks up the global tracer provider once, in
        its ``__init__``, called by the first ``Agent`` (or ``Swarm``, ``Graph``, bidi agent).
        """
        with self.lock:
            if self.hooked:
                return
            self.hooked = True
            try:
                strands_sdk.call_before_tracer_created(self.ensure_provider)
            except UpstreamChangedError as error:
                raise CaptureConfigError(f"capture cannot attach when Strands creates its tracer: {error}") from error

    def ensure_provider(self) -> None:
        """Attach to the global SDK provider, installing one first when there is none."""
        with self.lock:
            if not self.active:
                return
            provider = trace.get_tracer_provider()
            if provider in self.attached:
                return
            if not isinstance(provider, TracerProvider):
                if not isinstance(provider, trace.ProxyTracerProvider):
                    logger.warning(
                        "provider=<%s> | not an OpenTelemetry SDK tracer provider; strands-tito cannot attach to it",
                        type(provider).__name__,
                    )
                    return
                # Checked here, not at interpreter start: an application that sets up its own provider (with its
                # own exporters) before its first agent is a destination that start-up cannot see.
                try:
                    require_destination(self.request)
                except CaptureConfigError as error:
                    fail_start_up(error)
                provider = self.install_provider()
            self.attach(provider)

    def install_provider(self) -> TracerProvider:
        """Install an SDK tracer provider (standard ``OTEL_*`` settings, Agent Lightning ids on the resource)."""
        provider = TracerProvider(
            resource=Resource.create(agentlightning_identity()),
            sampler=capture_sampler(),
            id_generator=SystemRandomIdGenerator(),
        )
        trace.set_tracer_provider(provider)
        current = trace.get_tracer_provider()
        if current is not provider:  # another thread set one first
            provider.shutdown()
            if not isinstance(current, TracerProvider):
                raise CaptureConfigError(f"the global tracer provider is a {type(current).__name__}, not an SDK one")
            return current
        self.own.add(provider)
        logger.debug("installed an OpenTelemetry SDK tracer provider for trace capture")
        return provider

    def attach(self, provider: TracerProvider) -> None:
        """Add the requested span processors to ``provider`` and register the exit flush after it."""
        with self.lock:
            processors: list[SpanProcessor] = []
            otlp = self.request.otlp or (self.export_own_provider and provider in self.own)
            if otlp and provider not in self.otlp_covered:
                processors.append(self._processor("otlp", otlp_processor))
            for path in self.request.jsonl:
                processors.append(self._processor(f"jsonl:{path}", functools.partial(TrajectorySpanProcessor, path)))
            add_processors(provider, processors)
            attach_span_tree(provider)  # before any agent's span starts: the first agent's sub-agents find it
            if provider not in self.attached:
                self.attached.add(provider)
                register_exit_handler()  # after the provider registered its own shutdown

    def _processor(self, key: str, make: Callable[[], SpanProcessor]) -> SpanProcessor:
        processor = self.processors.get(key)
        if processor is None:
            processor = self.processors[key] = make()
        return processor


_switch = _Switch()


def enable_from_env(request: CaptureRequest | str | None = None) -> None:
    """Switch capture on as ``STRANDS_TITO_CAPTURE`` says (or as ``request`` says, in the same format).

    What the start-up hook runs; callable from code too, e.g. in a process started with ``python -S``.

    Raises:
        CaptureConfigError: the settings would lose data, or the value cannot be read.
    """
    settings = reload_settings()
    if request is None:
        request = settings.capture
    if isinstance(request, str):
        request = parse_capture(request)
    if request:
        _switch.enable(request)


def fail_start_up(error: BaseException) -> NoReturn:
    """Stop the process at interpreter start-up with a one-line reason (exit status 78, EX_CONFIG).

    An exception would not do: ``site`` prints and ignores one raised by a ``.pth`` line, and
    ``opentelemetry-instrument`` logs and ignores one raised by an instrumentor, and the program would run on without
    capture.
    """
    sys.stderr.write(f"strands-tito: trace capture cannot start: {error}\n")
    sys.stderr.flush()
    os._exit(EXIT_CONFIG_ERROR)


def require_destination(request: CaptureRequest, environ: Mapping[str, str] | None = None) -> None:
    """Refuse a capture that would send its trajectories nowhere.

    Switched on with no OTLP endpoint, no output file, no ``OTEL_TRACES_EXPORTER`` (``opentelemetry-instrument``
    exports itself) and no tracer provider of the application's by its first agent, a process would run to the end,
    exit 0 and leave no trajectory behind.

    Raises:
        CaptureConfigError: naming the variables that give capture a destination.
    """
    env = os.environ if environ is None else environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if request and not request.otlp and not request.jsonl and exporter in ("", "none"):
        raise CaptureConfigError(
            f"{ENV_CAPTURE} is on but has nowhere to send trajectories: set OTEL_EXPORTER_OTLP_ENDPOINT "
            f"(a collector, e.g. http://127.0.0.1:4318 for strands-tito collect) or "
            f"{ENV_CAPTURE}=jsonl:trajectories.jsonl"
        )


def start_up() -> None:
    """Switch capture on as ``STRANDS_TITO_CAPTURE`` asks; run by ``strands_tito_startup`` at interpreter start.

    Stops the process (:func:`fail_start_up`) when the settings would lose data; a capture with nowhere to send
    trajectories is stopped when the first agent is built with no tracer provider of the application's.
    """
    try:
        enable_from_env()
    except CaptureConfigError as error:
        fail_start_up(error)


def _loaded_by_opentelemetry_instrument() -> bool:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("opentelemetry.instrumentation.auto_instrumentation"):
            return True
        frame = frame.f_back
    return False


class TitoInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """strands-tito's OpenTelemetry instrumentor, loaded by ``opentelemetry-instrument``.

    It attaches capture to the tracer provider the configurator built (or installs one that exports OTLP when no
    distro did), plus whatever ``STRANDS_TITO_CAPTURE`` asks for. ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=strands_tito``
    turns it off; so does ``STRANDS_TITO_CAPTURE=0``.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """Strands versions whose tracer this works with."""
        return ("strands-agents >= 1.62",)

    def _instrument(self, **kwargs: Any) -> None:
        auto = _loaded_by_opentelemetry_instrument()
        try:
            settings = reload_settings()
            if not settings.capture_on:
                return
            request = parse_capture(settings.capture)
            # Under opentelemetry-instrument a provider that exists now is the configurator's, exporting as
            # OTEL_TRACES_EXPORTER says; `STRANDS_TITO_CAPTURE=otlp` must not make it send every span twice.
            _switch.enable(request, export_own_provider=True, otlp_covered=auto and _configurator_exports_otlp())
        except CaptureConfigError as error:
            if auto:
                fail_start_up(error)
            raise

    def _uninstrument(self, **kwargs: Any) -> None:
        _switch.disable()


__all__ = [
    "CaptureRequest",
    "TitoInstrumentor",
    "enable_from_env",
    "otlp_exporter",
    "parse_capture",
    "require_destination",
    "start_up",
]
