"""The one way in: what every receiver (OTLP/HTTP, OTLP/gRPC) does with a request, in one place.

A receiver only turns its protocol's request into a :class:`Submission` and the :class:`Outcome` back into its
protocol's answer (:data:`HTTP_STATUS`, :data:`GRPC_STATUS`), so both answer the same input the same way. In order:
authentication, size limits, back-pressure, decompression, decoding, validation and storage (the ingestor), OTLP
partial success, and holding the acknowledgement for exporters that ask for it.

Nothing a client sends raises out of :meth:`AcceptPath.accept`: bad input is a 4xx verdict, a store that cannot
write is ``UNAVAILABLE`` (the client retries); anything else is a bug.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import random
import sqlite3
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from strands_tito.otlp import OTLPDecodeError, parse_request

from .ingest import IngestResult, PayloadTooLarge, TooManyOpen
from .telemetry import Metrics

logger = logging.getLogger(__name__)
# Jitter from the operating system's generator, never the `random` module's global state (the host application's).
_JITTER = random.SystemRandom()

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
LARGE_REQUEST = 1024 * 1024
"""Decompressed bytes above which requests are processed one at a time (memory; see :meth:`AcceptPath.accept`)."""
MAX_MESSAGE = 4000
"""Longest reason sent back (a partial-success message joins one reason per rejected span)."""


def retry_after() -> int:
    """Seconds a refused client is told to wait (``Retry-After``): 1 to 3, spread so a burst does not come back at
    once."""
    return _JITTER.randint(1, 3)


class Verdict(enum.Enum):
    """What became of a submission."""

    OK = "ok"
    BAD_REQUEST = "bad_request"
    UNSUPPORTED = "unsupported_media_type"
    UNAUTHENTICATED = "unauthorized"
    TOO_LARGE = "too_large"
    UNAVAILABLE = "overloaded"


HTTP_STATUS = {
    Verdict.OK: 200,
    Verdict.BAD_REQUEST: 400,
    Verdict.UNSUPPORTED: 415,
    Verdict.UNAUTHENTICATED: 401,
    Verdict.TOO_LARGE: 413,
    Verdict.UNAVAILABLE: 503,
}
GRPC_STATUS = {
    Verdict.OK: grpc.StatusCode.OK,
    Verdict.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    Verdict.UNSUPPORTED: grpc.StatusCode.INVALID_ARGUMENT,
    Verdict.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    Verdict.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Verdict.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}


@dataclass(frozen=True)
class Submission:
    """One export request as a receiver got it: the raw body and the few headers that matter."""

    protocol: str
    """``http`` or ``grpc`` (for metrics)."""
    body: bytes
    authorization: str | None = None
    content_type: str = PROTOBUF
    content_encoding: str = ""
    """``gzip``/``deflate``/empty; gRPC bodies arrive already decompressed by the gRPC library."""


@dataclass(frozen=True)
class Outcome:
    """The verdict, why, and (when accepted) what was stored."""

    verdict: Verdict
    message: str = ""
    result: IngestResult | None = None
    retry_after: int | None = None

    def response(self) -> ExportTraceServiceResponse:
        """The OTLP response of an accepted request, with partial success when some spans were refused."""
        response = ExportTraceServiceResponse()
        if self.result is not None and self.result.errors:
            # The client must not retry; the good spans of the request are kept.
            response.partial_success.rejected_spans = self.result.rejected
            response.partial_success.error_message = "; ".join(self.result.errors)[:MAX_MESSAGE]
        return response


@dataclass(frozen=True)
class Limits:
    """The accept path's settings (from :class:`~strands_tito.collector.service.CollectorConfig`)."""

    token: str | None
    max_body_bytes: int
    max_decompressed_bytes: int
    max_inflight: int
    max_store_bytes: int

    def __repr__(self) -> str:  # the token never goes into a log or traceback
        return (
            f"Limits(token={'<set>' if self.token else None}, max_body_bytes={self.max_body_bytes}, "
            f"max_decompressed_bytes={self.max_decompressed_bytes}, max_inflight={self.max_inflight}, "
            f"max_store_bytes={self.max_store_bytes})"
        )


class AcceptPath:
    """Auth, limits, decode, validate, store, acknowledge: shared by every receiver.

    Args:
        limits: Token and limits.
        ingest: Validates and stores a decoded request (runs in a worker thread).
        store_size: Bytes the store holds now (back-pressure).
        hold: Waits, after storing, until the exporters that gate acknowledgements delivered what it finished.
        metrics: Counters.
    """

    def __init__(
        self,
        limits: Limits,
        ingest: Callable[[ExportTraceServiceRequest], IngestResult],
        store_size: Callable[[], int],
        hold: Callable[[IngestResult], Awaitable[None]],
        metrics: Metrics,
    ) -> None:
        self.limits = limits
        self._ingest = ingest
        self._store_size = store_size
        self._hold = hold
        self.metrics = metrics
        self.inflight = 0
        self._large = asyncio.Semaphore(1)

    async def accept(self, submission: Submission) -> Outcome:
        """Take one request; never raises for anything in it."""
        outcome = await self._accept(submission)
        self.metrics.count_request(submission.protocol, outcome.verdict.value)
        return outcome

    async def _accept(self, submission: Submission) -> Outcome:
        if not self.authorized(submission.authorization):
            return Outcome(Verdict.UNAUTHENTICATED, "missing or wrong bearer token")
        content_type = submission.content_type.split(";")[0].strip().lower()
        if content_type not in (PROTOBUF, JSON):
            return Outcome(Verdict.UNSUPPORTED, f"unsupported Content-Type {content_type[:100]!r}")
        if len(submission.body) > self.limits.max_body_bytes:
            return Outcome(Verdict.TOO_LARGE, f"body exceeds {self.limits.max_body_bytes} bytes")
        busy = self.overloaded()
        if busy is not None:
            return Outcome(Verdict.UNAVAILABLE, f"collector busy: {busy}", retry_after=retry_after())
        self.metrics.bytes_received += len(submission.body)
        self.inflight += 1
        try:
            return await self._decode_and_store(submission, content_type)
        finally:
            self.inflight -= 1

    async def _decode_and_store(self, submission: Submission, content_type: str) -> Outcome:
        try:
            body = await asyncio.to_thread(
                decompress, submission.body, submission.content_encoding, self.limits.max_decompressed_bytes
            )
        except PayloadTooLarge as e:
            return Outcome(Verdict.TOO_LARGE, str(e))
        except OTLPDecodeError as e:
            return Outcome(Verdict.BAD_REQUEST, str(e)[:MAX_MESSAGE])
        if len(body) <= LARGE_REQUEST:
            return await self._parse_and_store(body, content_type)
        # Decoding, storing and assembling cost about 20x the decompressed bytes at peak: large requests take turns,
        # so their memory is bounded by one at a time, not by --max-inflight of them (see docs/collector-faults.md).
        async with self._large:
            return await self._parse_and_store(body, content_type)

    async def _parse_and_store(self, body: bytes, content_type: str) -> Outcome:
        try:
            request = await asyncio.to_thread(parse_request, body, content_type)
        except OTLPDecodeError as e:
            return Outcome(Verdict.BAD_REQUEST, str(e)[:MAX_MESSAGE])
        del body
        try:
            result = await asyncio.to_thread(self._ingest, request)
        except TooManyOpen as e:
            return Outcome(Verdict.UNAVAILABLE, str(e), retry_after=retry_after())
        except (sqlite3.OperationalError, OSError) as e:  # disk full, locked, I/O: nothing was acknowledged
            logger.error("error=<%s> | store cannot take the request; answered unavailable", e)
            return Outcome(Verdict.UNAVAILABLE, "store unavailable", retry_after=retry_after())
        self.metrics.spans_received += result.accepted
        self.metrics.duplicates += result.duplicates
        self.metrics.spans_rejected += result.rejected
        for error in result.errors[:20]:
            logger.warning("error=<%.300s> | rejected span", error)
        if result.errors and not result.accepted and not result.duplicates:
            return Outcome(Verdict.BAD_REQUEST, "; ".join(result.errors)[:MAX_MESSAGE], result)
        await self._hold(result)
        return Outcome(Verdict.OK, "", result)

    def authorized(self, header: str | None) -> bool:
        """Bearer-token check (constant time); always true when no token is configured."""
        if self.limits.token is None:
            return True
        expected = f"Bearer {self.limits.token}".encode()
        return header is not None and hmac.compare_digest(header.encode("utf-8", "replace"), expected)

    def overloaded(self) -> str | None:
        """Why new data must wait (the client retries on 503/UNAVAILABLE), or None."""
        if self.inflight >= self.limits.max_inflight:
            return f"{self.inflight} requests in flight"
        size = self._store_size()
        if size >= self.limits.max_store_bytes:
            return f"store is full ({size} bytes); exporters are behind"
        return None


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """Undo ``Content-Encoding`` without ever holding more than ``limit`` bytes (a gzip bomb stops early)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        data = body
    elif encoding in ("gzip", "deflate"):
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error as e:
            raise OTLPDecodeError(f"body is not valid {encoding}: {e}") from e
        if len(data) > limit or inflater.unconsumed_tail:
            raise PayloadTooLarge(f"decompressed body exceeds {limit} bytes")
        if not inflater.eof:
            raise OTLPDecodeError(f"{encoding} body is truncated")
        if inflater.unused_data:
            raise OTLPDecodeError(f"trailing bytes after the {encoding} stream")
    else:
        raise OTLPDecodeError(f"unsupported Content-Encoding {encoding[:40]!r} (use gzip, deflate or none)")
    if len(data) > limit:
        raise PayloadTooLarge(f"body exceeds {limit} bytes")
    return data
