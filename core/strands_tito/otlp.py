"""Reading OTLP trace requests (protobuf or JSON) into plain spans the assembler understands."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from strands_tito.errors import StrandsTitoError


class OTLPDecodeError(StrandsTitoError, ValueError):
    """The request body is not a valid OTLP trace export request."""


@dataclass(frozen=True)
class ReceivedSpan:
    """A span as received: ids in hex, attributes and resource attributes as Python values."""

    trace_id: str
    span_id: str
    name: str
    end_time_unix_nano: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as lists, key-value lists as dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` pairs as a dict."""
    out: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        out[pair.key] = any_value(pair.value)
    return out


def parse_request(body: bytes, content_type: str = "application/x-protobuf") -> ExportTraceServiceRequest:
    """Parse an ``ExportTraceServiceRequest`` from protobuf or OTLP/JSON (hex ids, as the OTLP spec says).

    Raises:
        OTLPDecodeError: the body is not such a request (any shape, nesting or encoding problem; never another error).
    """
    request = ExportTraceServiceRequest()
    if "json" in content_type:
        try:
            data = json.loads(body)
            if not isinstance(data, dict):
                raise OTLPDecodeError(f"invalid OTLP/JSON: the body is a {type(data).__name__}, not an object")
            _hex_ids_to_base64(data)
            json_format.ParseDict(data, request, ignore_unknown_fields=True)
        except OTLPDecodeError:
            raise
        except (ValueError, TypeError, AttributeError, RecursionError, json_format.ParseError) as e:
            # RecursionError: deeply nested JSON; the others: any value of the wrong shape.
            raise OTLPDecodeError(f"invalid OTLP/JSON: {type(e).__name__}: {str(e)[:300]}") from e
        return request
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError) as e:
        raise OTLPDecodeError(f"invalid OTLP protobuf: {e}") from e
    return request


def _hex_ids_to_base64(data: dict[str, Any]) -> None:
    # OTLP/JSON spells trace and span ids in hex; protobuf's JSON mapping expects base64 for bytes fields.
    for resource_spans in _list(data, "resourceSpans"):
        for scope_spans in _list(resource_spans, "scopeSpans"):
            for span in _list(scope_spans, "spans"):
                for key in ("traceId", "spanId", "parentSpanId"):
                    value = span.get(key)
                    if value and not isinstance(value, str):
                        raise OTLPDecodeError(f"invalid OTLP/JSON: {key} must be a hex string")
                    if value:
                        try:
                            span[key] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            raise OTLPDecodeError(f"invalid OTLP/JSON: {key} {value[:40]!r} is not hex") from None


def _list(data: Any, key: str) -> list[dict[str, Any]]:
    """``data[key]`` as a list of objects (absent: empty), or a clear error naming the field."""
    if not isinstance(data, dict):
        raise OTLPDecodeError(f"invalid OTLP/JSON: expected an object holding {key}, got {type(data).__name__}")
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise OTLPDecodeError(f"invalid OTLP/JSON: {key} must be a list of objects")
    return value


def iter_spans(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    """Every span of a request with its resource attributes."""
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    name=span.name,
                    end_time_unix_nano=span.end_time_unix_nano,
                    attributes=attributes_of(span.attributes),
                    resource=resource,
                )
