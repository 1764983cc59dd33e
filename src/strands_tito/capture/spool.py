"""The local disk spool of strands-tito spans an agent process could not deliver yet.

Layout: ``<STRANDS_TITO_SPOOL_DIR>/<key>/<instance>/`` where ``key`` names the service and the OTLP endpoint the
spans were meant for, and ``instance`` is one live process (``<pid>-<random>``), which holds an exclusive ``flock``
on ``<instance>/lock`` for as long as it runs. A spool is a series of append-only segment files ``seg-<n>.spool``;
each record is one serialized OTLP ``ExportTraceServiceRequest``, framed as ``<u32 length><u32 crc32><payload>``
(little-endian) and fsync'd when written, so a torn last record (a crash mid-write) is recognised and skipped.
``seg-<n>.pos`` holds how far the segment has been delivered; a fully delivered segment is deleted.

A process that starts adopts the spools of dead processes with the same key (their lock is free): it moves their
segments in front of its own and sends them first. Delivery is at-least-once (a record acknowledged just before a
crash, whose position was not yet written, is sent again); the collector drops identical resends.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import struct
import threading
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace.status import Status, StatusCode

from strands_tito.errors import StrandsTitoError
from strands_tito.otlp import attributes_of
from strands_tito.settings import get_settings, variable

logger = logging.getLogger(__name__)

ENV_SPOOL_DIR = variable("spool_dir").name
_HEADER = struct.Struct("<II")
SEGMENT_BYTES = 16 * 1024 * 1024  # a new segment past this, so delivered data is freed in steps


def default_spool_root() -> Path:
    """``STRANDS_TITO_SPOOL_DIR``, else ``$XDG_CACHE_HOME/strands-tito/spool`` (``~/.cache/...``)."""
    configured = get_settings().spool_dir
    if configured is not None:
        return configured
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "strands-tito" / "spool"


def spool_key(service: str, endpoint: str) -> str:
    """The directory name shared by every process of one service sending to one endpoint."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", service)[:40] or "service"
    return f"{readable}-{hashlib.sha256(endpoint.encode()).hexdigest()[:12]}"


# -- OTLP records <-> SDK spans ----------------------------------------------------------------------------------------


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """Spans as one serialized OTLP export request (the exporters' own encoder)."""
    return bytes(encode_spans(spans).SerializeToString())


def _kind(value: int) -> trace_api.SpanKind:
    # OTLP counts SPAN_KIND_UNSPECIFIED as 0; the SDK's SpanKind starts at INTERNAL = 0.
    return trace_api.SpanKind(max(value - 1, 0))


def decode_request(payload: bytes) -> list[ReadableSpan]:
    """A spooled export request back as SDK spans, for the configured exporter to send (HTTP or gRPC alike)."""
    request = ExportTraceServiceRequest.FromString(payload)
    out: list[ReadableSpan] = []
    for resource_spans in request.resource_spans:
        resource = Resource(attributes_of(resource_spans.resource.attributes), resource_spans.schema_url or None)
        for scope_spans in resource_spans.scope_spans:
            scope = InstrumentationScope(
                scope_spans.scope.name,
                scope_spans.scope.version or None,
                scope_spans.schema_url or None,
                attributes_of(scope_spans.scope.attributes) or None,
            )
            for span in scope_spans.spans:
                out.append(_span_of(span, resource, scope))
    return out


def _context(trace_id: bytes, span_id: bytes, trace_state: str = "") -> trace_api.SpanContext:
    state = trace_api.TraceState.from_header([trace_state]) if trace_state else None
    return trace_api.SpanContext(
        int.from_bytes(trace_id, "big"),
        int.from_bytes(span_id, "big"),
        is_remote=False,
        trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED),
        trace_state=state,
    )


def _span_of(span: trace_pb2.Span, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    parent = _context(span.trace_id, span.parent_span_id) if span.parent_span_id else None
    events = [Event(e.name, attributes_of(e.attributes), e.time_unix_nano) for e in span.events]
    links = [
        trace_api.Link(_context(link.trace_id, link.span_id, link.trace_state), attributes_of(link.attributes))
        for link in span.links
    ]
    code = StatusCode(span.status.code) if span.status.code in (0, 1, 2) else StatusCode.UNSET
    return ReadableSpan(
        name=span.name,
        context=_context(span.trace_id, span.span_id, span.trace_state),
        parent=parent,
        resource=resource,
        attributes=attributes_of(span.attributes),
        events=events,
        links=links,
        kind=_kind(span.kind),
        status=Status(code, span.status.message or None) if code is StatusCode.ERROR else Status(code),
        start_time=span.start_time_unix_nano,
        end_time=span.end_time_unix_nano,
        instrumentation_scope=scope,
    )


# -- the files --------------------------------------------------------------------------------------------------------


@dataclass
class _Segment:
    path: Path
    delivered: int = 0  # bytes of records acknowledged
    size: int = 0  # bytes of whole records in the file

    @property
    def pos_path(self) -> Path:
        return self.path.with_suffix(".pos")


class SpoolError(StrandsTitoError, OSError):
    """The spool directory cannot be used."""


class Spool:
    """One process's spool: append records, read them back oldest first, acknowledge them.

    Thread-safe. ``pending_bytes`` counts what is written and not yet acknowledged, over every segment (adopted ones
    included).
    """

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.parent = directory
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._segments: deque[_Segment] = deque()
        self._writer: IO[bytes] | None = None
        self._closed = False
        self.pending_bytes = 0
        self.adopted_bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.dir, self._lock_file = self._claim_instance(directory)
        self._adopt_orphans()
        self._next = max((self._number(s.path) for s in self._segments), default=0) + 1

    # -- set-up ------------------------------------------------------------------------------------------------------

    @staticmethod
    def _claim_instance(parent: Path) -> tuple[Path, IO[bytes]]:
        # Made under a hidden name and locked before it gets its real name, so that no other process can take a
        # brand-new instance for an orphan.
        import fcntl

        hidden = parent / f".new-{os.getpid()}-{secrets.token_hex(4)}"
        hidden.mkdir()
        lock = (hidden / "lock").open("ab")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        final = parent / hidden.name[len(".new-") :]
        hidden.rename(final)
        return final, lock

    def _adopt_orphans(self) -> None:
        import fcntl

        for other in sorted(self.parent.iterdir()):
            if other == self.dir or other.name.startswith(".") or not other.is_dir():
                continue
            try:
                lock = (other / "lock").open("ab")
            except OSError:
                continue
            try:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live process holds it
                for segment in sorted(other.glob("seg-*.spool"), key=self._number):
                    moved = self.dir / f"seg-{len(self._segments) + 1:08d}.spool"
                    pos = segment.with_suffix(".pos")
                    if pos.exists():
                        os.replace(pos, moved.with_suffix(".pos"))
                    os.replace(segment, moved)
                    self._load_segment(moved)
                for leftover in other.iterdir():
                    leftover.unlink()
                other.rmdir()
            finally:
                lock.close()
        self.adopted_bytes = self.pending_bytes
        if self.adopted_bytes:
            logger.warning(
                "bytes=<%d>, spool=<%s> | resending spans a previous process could not deliver",
                self.adopted_bytes,
                self.dir,
            )

    @staticmethod
    def _number(path: Path) -> int:
        return int(path.stem.split("-", 1)[1])

    def _load_segment(self, path: Path) -> None:
        delivered = 0
        if path.with_suffix(".pos").exists():
            delivered = int.from_bytes(path.with_suffix(".pos").read_bytes()[:8] or b"\0", "little")
        size = 0
        with path.open("rb") as f:
            data = f.read()
        while size + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, size)
            end = size + _HEADER.size + length
            if end > len(data) or zlib.crc32(data[size + _HEADER.size : end]) != crc:
                break  # torn tail: the process died while writing it
            size = end
        segment = _Segment(path, min(delivered, size), size)
        self._segments.append(segment)
        self.pending_bytes += segment.size - segment.delivered

    # -- use ---------------------------------------------------------------------------------------------------------

    def append(self, payload: bytes) -> None:
        """Write one record and fsync it."""
        record = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            if self._closed:
                raise SpoolError("spool is closed")
            tail = self._segments[-1] if self._segments else None
            if self._writer is None or tail is None or tail.size >= self.segment_bytes:
                if self._writer is not None:
                    self._writer.close()
                tail = _Segment(self.dir / f"seg-{self._next:08d}.spool")
                self._next += 1
                self._writer = tail.path.open("ab")
                self._segments.append(tail)
            try:
                self._writer.write(record)
                self._writer.flush()
                os.fsync(self._writer.fileno())
            except OSError:
                # A full disk may have left part of the record in the file: past ``tail.size``, so never read; the
                # next record goes to a new segment instead of after the torn bytes.
                with contextlib.suppress(OSError):
                    self._writer.close()
                self._writer = None
                raise
            tail.size += len(record)
            self.pending_bytes += len(record)

    def peek(self) -> tuple[_Segment, int, bytes] | None:
        """The oldest unacknowledged record: ``(segment, end offset, payload)``."""
        with self._lock:
            while self._segments:
                segment = self._segments[0]
                if segment.delivered < segment.size:
                    with segment.path.open("rb") as f:
                        f.seek(segment.delivered)
                        length, _ = _HEADER.unpack(f.read(_HEADER.size))
                        payload = f.read(length)
                    return segment, segment.delivered + _HEADER.size + length, payload
                self._drop_segment(segment)
            return None

    def ack(self, segment: Any, end: int) -> None:
        """Mark everything up to ``end`` of ``segment`` delivered (deleting the segment once it is all delivered)."""
        with self._lock:
            if self._closed or segment not in self._segments or end <= segment.delivered:
                return
            self.pending_bytes -= end - segment.delivered
            segment.delivered = end
            if segment.delivered >= segment.size:  # all delivered (the next append starts a new segment)
                self._drop_segment(segment)
            else:
                segment.pos_path.write_bytes(end.to_bytes(8, "little"))

    def _is_writing(self, segment: _Segment) -> bool:
        return self._writer is not None and bool(self._segments) and self._segments[-1] is segment

    def _drop_segment(self, segment: _Segment) -> None:
        if self._is_writing(segment) and self._writer is not None:
            self._writer.close()
            self._writer = None
        self._segments.remove(segment)
        for path in (segment.path, segment.pos_path):
            path.unlink(missing_ok=True)

    def records(self) -> Iterator[bytes]:
        """The records not yet acknowledged, oldest first, without acknowledging them (``strands-tito spool list``)."""
        with self._lock:
            pending = [(s.path, s.delivered, s.size) for s in self._segments]
        for path, start, end in pending:
            with path.open("rb") as f:
                f.seek(start)
                data = f.read(end - start)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, _ = _HEADER.unpack_from(data, offset)
                yield data[offset + _HEADER.size : offset + _HEADER.size + length]
                offset += _HEADER.size + length

    def close(self) -> None:
        """Close the files; remove this instance's directory when nothing is left in it, else leave it for the next
        process (the lock is released either way)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if self.pending_bytes == 0:
                for path in self.dir.iterdir():
                    path.unlink(missing_ok=True)
                self.dir.rmdir()
                with contextlib.suppress(OSError):  # the key's directory too, unless another process uses it
                    self.parent.rmdir()
            self._lock_file.close()


__all__ = [
    "ENV_SPOOL_DIR",
    "Spool",
    "SpoolError",
    "decode_request",
    "default_spool_root",
    "encode_request",
    "spool_key",
]
