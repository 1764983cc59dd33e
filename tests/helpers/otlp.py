"""Build OTLP requests from trajectories, as an agent process would send them (for collector tests)."""

from __future__ import annotations

import gzip
import json
import os
import random
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from strands_tito import spans as schema
from strands_tito.otlp import ReceivedSpan, iter_spans, parse_request
from strands_tito.trajectory import Trajectory


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    out = AnyValue()
    out.array_value.values.extend(any_value(v) for v in value)
    return out


def make_span(name: str, attributes: dict[str, Any], trace_id: bytes | None = None) -> Span:
    span = Span(name=name, trace_id=trace_id or os.urandom(16), span_id=os.urandom(8))
    span.end_time_unix_nano = span.start_time_unix_nano = random.getrandbits(60)
    span.attributes.extend(KeyValue(key=k, value=any_value(v)) for k, v in attributes.items())
    return span


def make_request(spans: Iterable[Span], resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = ResourceSpans()
    rs.resource.attributes.extend(KeyValue(key=k, value=any_value(v)) for k, v in (resource or {}).items())
    scope = ScopeSpans()
    scope.spans.extend(spans)
    rs.scope_spans.append(scope)
    request.resource_spans.append(rs)
    return request


def random_trajectory(rng: random.Random, turns: int = 3, vocab: int = 151_000) -> Trajectory:
    t = Trajectory(trajectory_id=f"traj-{rng.getrandbits(64):016x}")
    for i in range(turns):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(3, 40) if i else rng.randint(50, 200))]
        output = [rng.randrange(vocab) for _ in range(rng.randint(1, 60))]
        t.append_turn(
            prompt,
            output,
            finish_reason="stop",
            prompt_logprobs=None if i == 0 else [-rng.random() for _ in prompt],
            output_logprobs=[-rng.random() for _ in output],
        )
    return t


def turn_attribute_sets(t: Trajectory, encoding: schema.Encoding = "packed", **extra: Any) -> list[dict[str, Any]]:
    """The ``tito.*`` attributes of each of the trajectory's turns, as ``record_turn`` puts them on a chat span."""
    out = []
    for turn in t.turns:
        start, end = turn.output_start, turn.output_start + turn.output_length
        out.append(
            schema.turn_attributes(
                t.trajectory_id,
                turn.index,
                turn.prompt_start,
                turn.prefix_crc32,
                t.token_ids[turn.prompt_start : start],
                t.logprobs[turn.prompt_start : start],
                t.token_ids[start:end],
                t.logprobs[start:end],
                finish_reason=turn.finish_reason,
                encoding=encoding,
                **extra,
            )
        )
    return out


def turn_spans(t: Trajectory, encoding: schema.Encoding = "packed") -> list[Span]:
    return [
        make_span("chat", {"gen_ai.operation.name": "chat", **attributes})
        for attributes in turn_attribute_sets(t, encoding, model_id="test-model")
    ]


def end_attributes(t: Trajectory, reason: str = "reset") -> dict[str, Any]:
    """The attributes of the trajectory's end signal."""
    return {
        schema.SCHEMA: schema.SCHEMA_VERSION,
        schema.KIND: "end",
        schema.TRAJECTORY_ID: t.trajectory_id,
        schema.END_REASON: reason,
        schema.END_TURNS: len(t.turns),
        schema.END_LENGTH: len(t),
        schema.END_CRC32: t.crc32,
    }


def end_span(t: Trajectory, reason: str = "reset") -> Span:
    return make_span(schema.SPAN_END, end_attributes(t, reason))


def reward_span(t: Trajectory, value: float) -> Span:
    return make_span(
        schema.SPAN_REWARD,
        {
            schema.SCHEMA: schema.SCHEMA_VERSION,
            schema.KIND: "reward",
            schema.TRAJECTORY_ID: t.trajectory_id,
            schema.REWARD_VALUE: value,
            schema.REWARD_NAME: "reward",
        },
    )


def all_spans(t: Trajectory, reward: float | None = None) -> list[Span]:
    spans = turn_spans(t)
    if reward is not None:
        spans.append(reward_span(t, reward))
    return [*spans, end_span(t)]


def read_jsonl(path: os.PathLike[str] | str) -> list[dict[str, Any]]:
    """The complete records of a JSONL file another process may still be appending to (a last line without its
    newline is being written: it is left for the next read)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as handle:
        *complete, _partial = handle.read().split(b"\n")
    return [json.loads(line) for line in complete]


class OTLPSink(ThreadingHTTPServer):
    """A real OTLP/HTTP receiver on 127.0.0.1 (a free port) that keeps every request body, gunzipped."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.bodies: list[bytes] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        """The base URL (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        return f"http://127.0.0.1:{self.server_port}"

    @property
    def traces_url(self) -> str:
        """The traces endpoint (an ``OTLPSpanExporter``'s ``endpoint``)."""
        return f"{self.url}/v1/traces"

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, decoded."""
        return [span for body in self.bodies for span in iter_spans(parse_request(body))]

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _SinkHandler(BaseHTTPRequestHandler):
    server: OTLPSink

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass
