"""From OTLP requests to stored spans and finished trajectories: the collector's single-writer core.

A record the store cannot take (a full disk) leaves its trajectory open: its spans are still in the store, and
the next sweep replays them and finishes it again.

Every span is validated completely here (by :func:`strands_tito.spans.decode_span`, the decoder the assembler uses)
before it is stored, so a stored span can always be assembled. Should building a record fail anyway, that one
trajectory is written as incomplete with the reason (quarantined) and the rest goes on; recovery at start-up uses the
same guard per trajectory, so a restart never fails on stored data.
"""

from __future__ import annotations

import itertools
import logging
import math
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord, quarantined
from strands_tito.errors import StrandsTitoError
from strands_tito.otlp import attributes_of
from strands_tito.records import AGL_IDENTITY_KEYS, agl_identity_error
from strands_tito.replay import TOP_P_IDS

from .store import Store, StoredSpan

logger = logging.getLogger(__name__)


class PayloadTooLarge(StrandsTitoError, ValueError):
    """The body, once decompressed, is larger than the collector accepts."""


class TooManyOpen(StrandsTitoError, RuntimeError):
    """The request starts new trajectories while ``max_open`` are open (the client retries later)."""


MAX_REQUEST_TOKENS = 2**20
"""Default ``--max-request-tokens``: token ids (prompt, output and top-p sets) one request may carry. Decoding and
assembling cost up to about 190 bytes per token at peak (docs/collector-faults.md), so about 200 MiB; the first turn
of a 1M-token context window still fits (an agent sends a span larger than its 4 MiB batches alone)."""
MAX_REQUEST_SPANS = 65_536
"""Default ``--max-request-spans``: spans one request may carry. An agent's exporter sends at most 512 a batch (the
SDK's ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``); the bound keeps a body of many tiny spans from making as many decoded
spans and error messages."""
_TOKEN_KEYS = frozenset({spans.PROMPT_IDS, spans.OUTPUT_IDS, TOP_P_IDS})


def _request_spans(request: ExportTraceServiceRequest) -> Iterator[tuple[dict[str, Any], Span]]:
    """Each span of a request with its resource's attributes (made JSON-safe once per resource)."""
    for resource_spans in request.resource_spans:
        resource = _json_safe(attributes_of(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield resource, span


def token_count(span: Span) -> int:
    """Token ids a span's arrays hold (prompt, output, top-p sets), read from its protobuf without decoding them:
    4 bytes each packed, one array entry each otherwise."""
    count = 0
    for pair in span.attributes:
        if pair.key in _TOKEN_KEYS:
            kind = pair.value.WhichOneof("value")
            if kind == "bytes_value":
                count += len(pair.value.bytes_value) // 4
            elif kind == "array_value":
                count += len(pair.value.array_value.values)
    return count


@dataclass
class IngestResult:
    """What became of one export request."""

    accepted: int = 0
    duplicates: int = 0
    ignored: int = 0
    errors: list[str] = field(default_factory=list)
    trajectories: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Every trajectory the request carried valid spans of, with the resource of those spans."""
    unread: int = 0
    """Spans past ``--max-request-spans``, refused without being read; one entry of ``errors`` names them all."""

    @property
    def rejected(self) -> int:
        """Spans refused (invalid, conflicting, or past a bound)."""
        return len(self.errors) + max(self.unread - 1, 0)


class Ingestor:
    """Validates, stores and assembles spans; one instance per collector, safe to call from several threads.

    Args:
        store: The durable store.
        exporters: Names of the exporters every finished trajectory is queued for.
        on_finished: Called (outside the lock) after trajectories were moved to the outbox.
        max_open: Open trajectories at once (``--max-open-trajectories``).
        max_request_tokens: Token ids one request may carry (``--max-request-tokens``); a span that would pass it is
            refused with the reason before its arrays are read, and the request's other spans are taken.
        max_request_spans: Spans one request may carry (``--max-request-spans``); the first ones are taken, those
            past it are refused unread, with the limit named.
    """

    def __init__(
        self,
        store: Store,
        exporters: list[str],
        on_finished: Callable[[], None] = lambda: None,
        max_open: int = 100_000,
        *,
        max_request_tokens: int = MAX_REQUEST_TOKENS,
        max_request_spans: int = MAX_REQUEST_SPANS,
    ) -> None:
        self.store = store
        self.max_open = max_open
        self.max_request_tokens = max_request_tokens
        self.max_request_spans = max_request_spans
        self.exporters = exporters
        # Only span references stay in memory; a trajectory's payload is read back from the store when it ends, so
        # memory does not grow with the number of trajectories in flight.
        self.assembler = TrajectoryAssembler(load=self._load)
        self.on_finished = on_finished
        self._lock = threading.Lock()
        self._unstored: set[str] = set()  # finished, but the store could not take the record: finished again
        self.finished_complete = 0
        self.finished_incomplete = 0

    @property
    def open_trajectories(self) -> int:
        """Trajectories not yet written (waiting for spans, or for a store that could not take their record)."""
        return self.assembler.open_trajectories + len(self._unstored)

    def recover(self) -> int:
        """Rebuild open trajectories from the store after a (re)start; returns how many spans were replayed.

        Never raises on stored data: a trajectory whose spans no longer decode (e.g. stored by an older, more lenient
        collector) is written as incomplete with the reason.
        """
        by_trajectory: dict[str, list[StoredSpan]] = {}
        for stored in self.store.open_spans():
            by_trajectory.setdefault(stored.trajectory_id, []).append(stored)
        replayed = 0
        done: list[TrajectoryRecord] = []
        with self._lock:
            for trajectory_id, stored_spans in by_trajectory.items():
                done.extend(self._replay(trajectory_id, stored_spans))
                replayed += len(stored_spans)
            self._finish(done)
        if done:
            self.on_finished()
        return replayed

    def _replay(self, trajectory_id: str, stored_spans: list[StoredSpan]) -> list[TrajectoryRecord]:
        """Add a trajectory's stored spans to the assembler; never raises on stored data (quarantine instead)."""
        try:
            decoded = [_decode_stored(stored, unpack=False) for stored in stored_spans]
        except Exception as e:  # anything at all: this trajectory only is quarantined
            logger.error("trajectory_id=<%.80s>, error=<%s> | stored spans do not decode", trajectory_id, e)
            return [quarantined(trajectory_id, e)]
        done: list[TrajectoryRecord] = []
        for stored, span in zip(stored_spans, decoded, strict=True):
            done.extend(self.assembler.add(span, trace_id=stored.trace_id, resource=stored.resource))
        return done

    def ingest(self, request: ExportTraceServiceRequest) -> IngestResult:
        """Store the strands-tito spans of one request (committed before returning) and assemble them."""
        result = IngestResult()
        candidates = self._decode_request(request, result)
        done: list[TrajectoryRecord] = []
        with self._lock:
            if self.open_trajectories >= self.max_open:
                unseen = {s.trajectory_id for s, _ in candidates if not self.assembler.is_open(s.trajectory_id)}
                if unseen - self.store.finished(unseen):
                    raise TooManyOpen(
                        f"{self.open_trajectories} trajectories are open (--max-open-trajectories); spans of open "
                        "ones are taken, new ones wait"
                    )
            late = self.store.finished(s.trajectory_id for s, _ in candidates)
            retries = self.store.written((s.trace_id, s.span_id) for s, _ in candidates if s.trajectory_id in late)
            keep: list[tuple[StoredSpan, spans.Decoded]] = []
            conflicts: dict[str, list[str]] = {}
            for stored, decoded in candidates:
                if stored.trajectory_id in late:
                    if (stored.trace_id, stored.span_id) in retries:
                        result.duplicates += 1  # an OTLP retry of something already written
                    else:
                        result.errors.append(
                            f"span {stored.span_id}: trajectory {stored.trajectory_id[:80]!r} was already written; "
                            "a trajectory id cannot be reused"
                        )
                    continue
                clash = self.assembler.conflict(decoded)
                if clash is not None:
                    result.errors.append(f"span {stored.span_id}: {clash}")
                    conflicts.setdefault(stored.trajectory_id, []).append(clash)
                    continue
                keep.append((stored, decoded))
            new = self.store.add_spans([s for s, _ in keep], conflicts)
            for trajectory_id, notes in conflicts.items():
                self.assembler.note_conflicts(trajectory_id, notes)
            for (stored, decoded), is_new in zip(keep, new, strict=True):
                if not is_new:
                    result.duplicates += 1
                    continue
                result.accepted += 1
                done.extend(self.assembler.add(decoded, trace_id=stored.trace_id, resource=stored.resource))
            self._finish(done)
        if done:
            self.on_finished()
        return result

    def _decode_request(
        self, request: ExportTraceServiceRequest, result: IngestResult
    ) -> list[tuple[StoredSpan, spans.Decoded]]:
        """Validate every strands-tito span of a request; invalid ones go to ``result.errors``."""
        candidates: list[tuple[StoredSpan, spans.Decoded]] = []
        # Counted on the protobuf: the spans past the bound are never read.
        count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
        if count > self.max_request_spans:
            result.unread = count - self.max_request_spans
            result.errors.append(
                f"the request holds {count} spans; the collector takes at most {self.max_request_spans} per request "
                f"(--max-request-spans): the last {result.unread} were refused unread"
            )
        tokens = 0
        for resource, span in itertools.islice(_request_spans(request), self.max_request_spans):
            # Counted on the protobuf, before any array becomes Python objects (the costly step).
            span_tokens = token_count(span)
            if tokens + span_tokens > self.max_request_tokens:
                result.errors.append(
                    f"span {span.span_id.hex()[:16]}: its {span_tokens} token ids would bring the request "
                    f"to {tokens + span_tokens}; the collector takes at most {self.max_request_tokens} per "
                    "request (--max-request-tokens)"
                )
                continue
            tokens += span_tokens
            attributes = attributes_of(span.attributes)
            if not spans.is_tito_span(attributes):
                result.ignored += 1
                continue
            identity = _with_span_identity(resource, attributes)
            try:
                _check_ids(span)
                decoded = spans.decode_span(attributes, span.end_time_unix_nano, unpack=False)
                bad_identity = agl_identity_error(identity)
                if bad_identity is not None:  # it would become part of a URL path (Agent Lightning)
                    raise spans.SpanSchemaError(bad_identity)
            except spans.SpanSchemaError as e:
                result.errors.append(f"span {span.span_id.hex()[:16]}: {e}")
                continue
            stored = StoredSpan(
                span.trace_id.hex(),
                span.span_id.hex(),
                decoded.trajectory_id,
                span.SerializeToString(),
                identity,
            )
            candidates.append((stored, decoded))
            result.trajectories.setdefault(decoded.trajectory_id, stored.resource)
        return candidates

    def _load(self, trajectory_id: str) -> tuple[dict[int, spans.TurnSpan], dict[int, spans.CallSpan]]:
        turns: dict[int, spans.TurnSpan] = {}
        calls: dict[int, spans.CallSpan] = {}
        for stored in self.store.spans_of(trajectory_id):
            decoded = _decode_stored(stored, unpack=True)
            if isinstance(decoded, spans.TurnSpan):
                turns.setdefault(decoded.index, decoded)
            elif isinstance(decoded, spans.CallSpan):
                calls.setdefault(decoded.index, decoded)
        return turns, calls

    def sweep(self, idle_seconds: float) -> int:
        """Finish trajectories idle longer than ``idle_seconds`` (as incomplete); returns how many."""
        with self._lock:
            done: list[TrajectoryRecord] = []
            for trajectory_id in sorted(self._unstored):
                stored_spans = self.store.spans_of(trajectory_id)
                self._unstored.discard(trajectory_id)
                done.extend(self._replay(trajectory_id, stored_spans))
            done.extend(self.assembler.flush(idle_seconds))
            self._finish(done)
        if done:
            self.on_finished()
        return len(done)

    def _finish(self, records: list[TrajectoryRecord]) -> None:
        """Store finished records; raises the store's error (after trying every record) when one could not be kept:
        that trajectory stays open and the next sweep finishes it again."""
        failure: Exception | None = None
        for record in records:
            try:
                record = self._store_record(record)
            except (sqlite3.OperationalError, OSError) as e:  # disk full, I/O error: nothing of it was committed
                logger.error(
                    "trajectory_id=<%.80s>, error=<%s> | record not stored; the trajectory stays open",
                    record.trajectory_id,
                    e,
                )
                self.assembler.reopen(record.trajectory_id)
                self._unstored.add(record.trajectory_id)
                failure = e
                continue
            if record.complete:
                self.finished_complete += 1
            else:
                self.finished_incomplete += 1
            logger.info(
                "trajectory_id=<%.80s>, complete=<%s>, tokens=<%d>, reason=<%.300s> | trajectory finished",
                record.trajectory_id,
                record.complete,
                len(record.trajectory),
                record.reason,
            )
        if failure is not None:
            raise failure

    def _store_record(self, record: TrajectoryRecord) -> TrajectoryRecord:
        """Move a finished record to the outbox (quarantined when it does not serialize); returns what was stored."""
        stored_conflicts = self.store.conflicts(record.trajectory_id)
        if stored_conflicts and record.complete:
            record.complete = False
            record.reason = "; ".join(stored_conflicts)
        try:
            row = record.to_dict()
            self.store.finish(record.trajectory_id, row, self.exporters)
        except (ValueError, TypeError) as e:  # the record does not serialize: quarantine it, keep going
            logger.error("trajectory_id=<%.80s>, error=<%s> | record cannot be written", record.trajectory_id, e)
            record = quarantined(record.trajectory_id, e)
            self.store.finish(record.trajectory_id, record.to_dict(), self.exporters)
        return record


def _decode_stored(stored: StoredSpan, *, unpack: bool) -> spans.Decoded:
    """A stored span, decoded (and validated) again."""
    span = Span()
    span.ParseFromString(stored.span)
    return spans.decode_span(attributes_of(span.attributes), span.end_time_unix_nano, unpack=unpack)


def _check_ids(span: Span) -> None:
    """OTLP ids of the right size and not all zero: spans are deduplicated by them, so a missing id would make
    different spans look like retries of one another."""
    if len(span.trace_id) != 16 or not any(span.trace_id):
        raise spans.SpanSchemaError("trace_id must be 16 bytes, not all zero")
    if len(span.span_id) != 8 or not any(span.span_id):
        raise spans.SpanSchemaError("span_id must be 8 bytes, not all zero")


def _json_safe(value: Any) -> Any:
    """Resource attributes as plain JSON (they go into every record): bytes as hex, non-finite floats as text."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _with_span_identity(resource: dict[str, Any], attributes: dict[str, Any]) -> dict[str, Any]:
    """The resource, plus the Agent Lightning ids capture puts on its spans when the resource lacks them (an app's
    own tracer provider built without the environment's resource attributes)."""
    missing = {k: _json_safe(attributes[k]) for k in AGL_IDENTITY_KEYS if k in attributes and k not in resource}
    return {**resource, **missing} if missing else resource
