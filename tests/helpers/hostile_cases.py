"""The hostile-input table for the collector: real OTLP bodies built from real spans, each made wrong in one way.

``BODY_CASES`` are request bodies that go over both OTLP/HTTP (protobuf) and OTLP/gRPC; ``HTTP_CASES`` are
HTTP-only (content types, encodings, JSON); ``RAW_HTTP_CASES`` are bytes written to the socket (framing).
Span cases poison the *victim* trajectory (turn 0 sent before, turn 1 and the end after), so a case that slipped
through would show up as a victim record that is not exact.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from strands_tito import spans as schema

from .otlp import any_value, make_request, make_span, random_trajectory, turn_spans

VICTIM = random_trajectory(random.Random(1001), turns=3)
OTHER = random_trajectory(random.Random(1002), turns=2)
TOKEN = "hostile-test-token"
MAX_BODY = 2 * 1024 * 1024
MAX_DECOMPRESSED = 4 * 1024 * 1024
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Case:
    """A body and the verdict both protocols must give it (``ok``, ``bad``, ``auth``, ``large``)."""

    body: bytes
    expect: str
    authorization: str | None = f"Bearer {TOKEN}"


def _victim_turn(index: int = 1) -> Span:
    span = Span()
    span.CopyFrom(turn_spans(VICTIM)[index])
    return span


def turn_with(**change: Any) -> bytes:
    """Victim's turn 1 with attributes replaced (a value of ``None`` removes the attribute)."""
    span = _victim_turn()
    keep = []
    for kv in span.attributes:
        key = kv.key
        if key in change:
            if change[key] is None:
                continue
            kv.value.CopyFrom(change[key] if isinstance(change[key], AnyValue) else any_value(change[key]))
        keep.append(kv)
    present = {kv.key for kv in keep}
    for key, value in change.items():
        if value is not None and key not in present:
            keep.append(KeyValue(key=key, value=value if isinstance(value, AnyValue) else any_value(value)))
    del span.attributes[:]
    span.attributes.extend(keep)
    return make_request([span]).SerializeToString()


def span_of(kind: str, **attributes: Any) -> bytes:
    """A reward, end or call span of a trajectory the collector has not seen."""
    base = {schema.SCHEMA: 1, schema.KIND: kind, schema.TRAJECTORY_ID: f"hostile-{kind}-{random.random()}"}
    return make_request([make_span("x", {**base, **attributes})]).SerializeToString()


def call_with(**change: Any) -> bytes:
    attributes = schema.call_attributes("hostile-call", 0, [1, 2, 3], [4, 5], [-0.5, -0.25], finish_reason="stop")
    attributes.update(change)
    return make_request([make_span("chat", {k: v for k, v in attributes.items() if v is not None})]).SerializeToString()


def ids_changed(trace_id: bytes | None = None, span_id: bytes | None = None) -> bytes:
    span = _victim_turn()
    if trace_id is not None:
        span.trace_id = trace_id
    if span_id is not None:
        span.span_id = span_id
    return make_request([span]).SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def nested_attribute(depth: int) -> bytes:
    """Victim's turn 1 plus an attribute nested ``depth`` arrays deep, as raw protobuf (the library refuses to build
    what it refuses to parse)."""
    value = AnyValue(int_value=1).SerializeToString()
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value -> ArrayValue.values
    span = _victim_turn().SerializeToString() + _field(9, _field(1, b"deep") + _field(2, value))
    return _field(1, _field(2, _field(2, span)))  # request.resource_spans.scope_spans.spans


def raw_field(number: int, wire: int, payload: bytes) -> bytes:
    return bytes([number << 3 | wire]) + payload


P = schema
LONG = "x" * 5000
f32 = struct.Struct("<f")
GOOD = make_request(turn_spans(OTHER)).SerializeToString()

BODY_CASES: dict[str, Case] = {
    # authentication
    "no token": Case(GOOD, "auth", None),
    "wrong token": Case(GOOD, "auth", "Bearer nope"),
    "token without Bearer": Case(GOOD, "auth", TOKEN),
    "token with an extra suffix": Case(GOOD, "auth", f"Bearer {TOKEN}x"),
    # size
    "body over the limit": Case(b"\n" + b"\xff" * (MAX_BODY + 10), "large"),
    # OTLP structure
    "garbage bytes": Case(b"\x00\xffnot a protobuf\x13\x37" * 10, "bad"),
    "truncated protobuf": Case(GOOD[:-7], "bad"),
    "invalid wire type": Case(bytes([1 << 3 | 7]), "bad"),
    "length beyond the body": Case(raw_field(1, 2, b"\x7f\x01"), "bad"),
    "deeply nested attribute value": Case(nested_attribute(200), "bad"),
    "empty trace id": Case(ids_changed(trace_id=b""), "bad"),
    "short span id": Case(ids_changed(span_id=b"\x01\x02\x03"), "bad"),
    "all-zero span id": Case(ids_changed(span_id=bytes(8)), "bad"),
    "all-zero trace id": Case(ids_changed(trace_id=bytes(16)), "bad"),
    # schema, kind, trajectory id
    "unknown schema version": Case(turn_with(**{P.SCHEMA: 2}), "bad"),
    "schema version as text": Case(turn_with(**{P.SCHEMA: "1"}), "bad"),
    "schema version as bool": Case(turn_with(**{P.SCHEMA: True}), "bad"),
    "unknown kind": Case(turn_with(**{P.KIND: "banana"}), "bad"),
    "kind as int": Case(turn_with(**{P.KIND: 3}), "bad"),
    "missing kind": Case(turn_with(**{P.KIND: None}), "bad"),
    "empty trajectory id": Case(turn_with(**{P.TRAJECTORY_ID: ""}), "bad"),
    "1 MiB trajectory id": Case(turn_with(**{P.TRAJECTORY_ID: "t" * (1 << 20)}), "bad"),
    "trajectory id as int": Case(turn_with(**{P.TRAJECTORY_ID: 7}), "bad"),
    # turn index, prefix
    "negative turn index": Case(turn_with(**{P.TURN_INDEX: -1}), "bad"),
    "turn index beyond int32": Case(turn_with(**{P.TURN_INDEX: 2**40}), "bad"),
    "turn index as text": Case(turn_with(**{P.TURN_INDEX: "one"}), "bad"),
    "turn index as float": Case(turn_with(**{P.TURN_INDEX: 1.0}), "bad"),
    "negative prefix length": Case(turn_with(**{P.PREFIX_LENGTH: -5}), "bad"),
    "prefix length as text": Case(turn_with(**{P.PREFIX_LENGTH: "5"}), "bad"),
    "negative prefix crc": Case(turn_with(**{P.PREFIX_CRC32: -1}), "bad"),
    "prefix crc beyond 32 bits": Case(turn_with(**{P.PREFIX_CRC32: 2**33}), "bad"),
    "missing prefix crc": Case(turn_with(**{P.PREFIX_CRC32: None}), "bad"),
    # token ids
    "missing prompt ids": Case(turn_with(**{P.PROMPT_IDS: None}), "bad"),
    "prompt ids as text": Case(turn_with(**{P.PROMPT_IDS: "1,2,3"}), "bad"),
    "packed prompt ids of 3 bytes": Case(turn_with(**{P.PROMPT_IDS: b"\x01\x00\x00"}), "bad"),
    "negative id in a list": Case(turn_with(**{P.OUTPUT_IDS: [1, -2], P.OUTPUT_LOGPROBS: [0.0, 0.0]}), "bad"),
    "id beyond int32 in a list": Case(turn_with(**{P.OUTPUT_IDS: [1, 2**31], P.OUTPUT_LOGPROBS: [0.0, 0.0]}), "bad"),
    "float id in a list": Case(turn_with(**{P.OUTPUT_IDS: [1, 2.5], P.OUTPUT_LOGPROBS: [0.0, 0.0]}), "bad"),
    "text id in a list": Case(turn_with(**{P.OUTPUT_IDS: ["a"], P.OUTPUT_LOGPROBS: [0.0]}), "bad"),
    "negative packed id": Case(turn_with(**{P.OUTPUT_IDS: struct.pack("<i", -3), P.OUTPUT_LOGPROBS: b"\0" * 4}), "bad"),
    "empty output": Case(turn_with(**{P.OUTPUT_IDS: b"", P.OUTPUT_LOGPROBS: b""}), "bad"),
    # logprobs
    "logprobs of wrong length": Case(turn_with(**{P.OUTPUT_LOGPROBS: b"\0\0\0\0" * 999}), "bad"),
    "missing prompt logprobs": Case(turn_with(**{P.PROMPT_LOGPROBS: None}), "bad"),
    "+inf packed logprob": Case(turn_with(**{P.OUTPUT_IDS: [5], P.OUTPUT_LOGPROBS: f32.pack(float("inf"))}), "bad"),
    "-inf listed logprob": Case(turn_with(**{P.OUTPUT_IDS: [5], P.OUTPUT_LOGPROBS: [float("-inf")]}), "bad"),
    "logprob beyond float range": Case(turn_with(**{P.OUTPUT_IDS: [5], P.OUTPUT_LOGPROBS: [1e308 * 10]}), "bad"),
    "text logprob": Case(turn_with(**{P.OUTPUT_IDS: [5], P.OUTPUT_LOGPROBS: ["-0.5"]}), "bad"),
    "bool logprobs": Case(turn_with(**{P.OUTPUT_IDS: [5], P.OUTPUT_LOGPROBS: [True]}), "bad"),
    # finish reason and optional attributes
    "unknown finish reason": Case(turn_with(**{P.FINISH_REASON: "banana"}), "bad"),
    "finish reason as int": Case(turn_with(**{P.FINISH_REASON: 1}), "bad"),
    "5000-char finish reason": Case(turn_with(**{P.FINISH_REASON: LONG}), "bad"),
    "cached tokens as text": Case(turn_with(**{P.CACHED_TOKENS: "12"}), "bad"),
    "negative cached tokens": Case(turn_with(**{P.CACHED_TOKENS: -1}), "bad"),
    "cached tokens as float": Case(turn_with(**{P.CACHED_TOKENS: 1.5}), "bad"),
    "tool parse errors: an object": Case(turn_with(**{P.TOOL_PARSE_ERRORS: b'{"a": "b"}'}), "bad"),
    "tool parse errors: not JSON": Case(turn_with(**{P.TOOL_PARSE_ERRORS: b"\xff\xfe"}), "bad"),
    "tool parse errors: list of ints": Case(turn_with(**{P.TOOL_PARSE_ERRORS: b"[1, 2]"}), "bad"),
    "tool parse errors: an int": Case(turn_with(**{P.TOOL_PARSE_ERRORS: 7}), "bad"),
    "tool parse errors: deep nesting": Case(turn_with(**{P.TOOL_PARSE_ERRORS: b"[" * 100_000}), "bad"),
    "routed experts of 3 bytes": Case(turn_with(**{P.ROUTED_EXPERTS: b"\x01\x02\x03"}), "bad"),
    "routed experts as text": Case(turn_with(**{P.ROUTED_EXPERTS: "AAAA"}), "bad"),
    "request id as int": Case(turn_with(**{P.REQUEST_ID: 5}), "bad"),
    "5000-char model id": Case(turn_with(**{P.MODEL_ID: LONG}), "bad"),
    "weight version as list": Case(turn_with(**{P.WEIGHT_VERSION: [1, 2]}), "bad"),
    "first turn without prompt": Case(
        make_request(
            [
                make_span(
                    "chat", schema.turn_attributes("hostile-first", 0, 0, 0, [], [], [1], [0.0], finish_reason="stop")
                )
            ]
        ).SerializeToString(),
        "bad",
    ),
    # rewards and end signals
    "NaN reward": Case(span_of("reward", **{P.REWARD_VALUE: float("nan")}), "bad"),
    "infinite reward": Case(span_of("reward", **{P.REWARD_VALUE: float("inf")}), "bad"),
    "reward as text": Case(span_of("reward", **{P.REWARD_VALUE: "1.0"}), "bad"),
    "missing reward value": Case(span_of("reward"), "bad"),
    "reward name as int": Case(span_of("reward", **{P.REWARD_VALUE: 1.0, P.REWARD_NAME: 3}), "bad"),
    "end signal claiming 0 turns": Case(
        span_of("end", **{P.END_TURNS: 0, P.END_LENGTH: 0, P.END_CRC32: 0, P.END_REASON: "reset"}), "bad"
    ),
    "end signal claiming -1 turns": Case(span_of("end", **{P.END_TURNS: -1, P.END_LENGTH: 5, P.END_CRC32: 0}), "bad"),
    "end length as text": Case(span_of("end", **{P.END_TURNS: 1, P.END_LENGTH: "5", P.END_CRC32: 0}), "bad"),
    "end crc beyond 32 bits": Case(span_of("end", **{P.END_TURNS: 1, P.END_LENGTH: 5, P.END_CRC32: 2**40}), "bad"),
    "unknown end unit": Case(
        span_of("end", **{P.END_TURNS: 1, P.END_LENGTH: 5, P.END_CRC32: 0, P.END_UNIT: "bananas"}), "bad"
    ),
    "end reason as int": Case(
        span_of("end", **{P.END_TURNS: 1, P.END_LENGTH: 5, P.END_CRC32: 0, P.END_REASON: 4}), "bad"
    ),
    # calls
    "negative call index": Case(call_with(**{P.CALL_INDEX: -1}), "bad"),
    "call without prompt": Case(call_with(**{P.PROMPT_IDS: b""}), "bad"),
    "call with infinite logprob": Case(call_with(**{P.OUTPUT_LOGPROBS: [float("inf"), 0.0]}), "bad"),
    "call finish reason as list": Case(call_with(**{P.FINISH_REASON: ["stop"]}), "bad"),
    # valid but unusual: accepted
    "empty request": Case(b"", "ok"),
    "no strands-tito spans": Case(make_request([make_span("other", {"a": 1})]).SerializeToString(), "ok"),
}


def _gz(data: bytes) -> bytes:
    return gzip.compress(data)


JSON = "application/json"
HTTP_CASES: dict[str, tuple[bytes, dict[str, str], int]] = {
    "content type text/plain": (GOOD, {"Content-Type": "text/plain"}, 415),
    "no content type": (GOOD, {"Content-Type": ""}, 415),
    "gzip bomb": (_gz(b"\0" * (MAX_DECOMPRESSED + 1024)), {"Content-Encoding": "gzip"}, 413),
    "deflate bomb": (zlib.compress(b"\0" * (MAX_DECOMPRESSED + 1024)), {"Content-Encoding": "deflate"}, 413),
    "not gzip": (b"\x1f\x8b\x08 not gzip", {"Content-Encoding": "gzip"}, 400),
    "truncated gzip": (_gz(GOOD)[:-12], {"Content-Encoding": "gzip"}, 400),
    "gzip with trailing garbage": (_gz(GOOD) + b"junk", {"Content-Encoding": "gzip"}, 400),
    "not deflate": (b"\x78\x9c garbage", {"Content-Encoding": "deflate"}, 400),
    "unknown content encoding": (GOOD, {"Content-Encoding": "br"}, 400),
    "JSON: not an object": (b"[1, 2, 3]", {"Content-Type": JSON}, 400),
    "JSON: null": (b"null", {"Content-Type": JSON}, 400),
    "JSON: resourceSpans not a list": (b'{"resourceSpans": {"a": 1}}', {"Content-Type": JSON}, 400),
    "JSON: spans an object": (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": {"x": 1}}]}]}',
        {"Content-Type": JSON},
        400,
    ),
    "JSON: deep nesting": (b"[" * 200_000 + b"]" * 200_000, {"Content-Type": JSON}, 400),
    "JSON: traceId not hex": (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
        {"Content-Type": JSON},
        400,
    ),
    "JSON: traceId a number": (
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 12}]}]}]}',
        {"Content-Type": JSON},
        400,
    ),
    "JSON: invalid UTF-8": (b'{"resourceSpans": "\xff"}', {"Content-Type": JSON}, 400),
    "JSON: wrong attribute shape": (
        json.dumps({"resourceSpans": [{"resource": {"attributes": {"k": "v"}}}]}).encode(),
        {"Content-Type": JSON},
        400,
    ),
}

# With the token: the token is checked on the head, before the body is read, so without it these would be 401s.
REQUEST_LINE = (
    b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    + f"Authorization: Bearer {TOKEN}\r\n".encode()
)
RAW_HTTP_CASES: dict[str, tuple[bytes, int]] = {
    "Content-Length with superscript digit": (REQUEST_LINE + "Content-Length: ²\r\n\r\n".encode(), 400),
    "Content-Length with Arabic-Indic digits": (REQUEST_LINE + "Content-Length: ١٢\r\n\r\n".encode(), 400),
    "negative Content-Length": (REQUEST_LINE + b"Content-Length: -1\r\n\r\n", 400),
    "Content-Length over the limit": (REQUEST_LINE + b"Content-Length: 99999999999\r\n\r\n", 413),
    "negative chunk size": (REQUEST_LINE + b"Transfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n", 400),
    "chunk size with 0x prefix": (REQUEST_LINE + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nabcde\r\n0\r\n\r\n", 400),
    "bad request line": (b"POST /v1/traces\r\n\r\n", 400),
    "header line without colon": (REQUEST_LINE + b"oops\r\n\r\n", 400),
    "request head too large": (REQUEST_LINE + b"X-Big: " + b"a" * 200_000 + b"\r\n\r\n", 431),
    "body shorter than Content-Length then close": (REQUEST_LINE + b"Content-Length: 100\r\n\r\nabc", 400),
    # RFC 9112 section 6 framing, case by case (request smuggling behind a proxy that frames differently)
    "Content-Length and Transfer-Encoding": (
        REQUEST_LINE + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    "two different Content-Lengths": (REQUEST_LINE + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
    "Transfer-Encoding xchunked": (REQUEST_LINE + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501),
    "chunked not the last coding": (REQUEST_LINE + b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 501),
    "Content-Length with a sign": (REQUEST_LINE + b"Content-Length: +3\r\n\r\nabc", 400),
    "HTTP/1.1 without Host": (b"POST /v1/traces HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400),
    "wrong token, body never read": (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer no\r\n"
        + f"Content-Length: {MAX_BODY}\r\n\r\n".encode(),
        401,
    ),
}
