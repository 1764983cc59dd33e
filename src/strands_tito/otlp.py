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


class OTLPDecodeError(ValueError):
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
    """Parse an ``ExportTraceServiceRequest`` from protobuf or OTLP/JSON (hex ids, as the OTLP spec says)."""
    request = ExportTraceServiceRequest()
    if "json" in content_type:
        try:
            data = json.loads(body)
            _hex_ids_to_base64(data)
            json_format.ParseDict(data, request, ignore_unknown_fields=True)
        except (ValueError, TypeError, json_format.ParseError) as e:
            raise OTLPDecodeError(f"invalid OTLP/JSON: {e}") from e
        return request
    try:
        request.ParseFromString(body)
    except DecodeError as e:
        raise OTLPDecodeError(f"invalid OTLP protobuf: {e}") from e
    return request


def _hex_ids_to_base64(data: Any) -> None:
    # OTLP/JSON spells trace and span ids in hex; protobuf's JSON mapping expects base64 for bytes fields.
    for resource_spans in data.get("resourceSpans", []) if isinstance(data, dict) else []:
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()


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
