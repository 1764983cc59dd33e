"""Spans made by the real OpenTelemetry SDK and reassembled: what capture emitted, decoded back into trajectories."""

from __future__ import annotations

from typing import Any

import numpy as np
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord
from strands_tito.trajectory import Trajectory

from .otlp import turn_attribute_sets


def assemble(items: list[tuple[dict[str, Any], int, str]], wanted: set[str]) -> dict[str, TrajectoryRecord]:
    """Decode tito spans (attributes, end time, trace id) of the wanted trajectories and assemble them."""
    assembler = TrajectoryAssembler()
    records: dict[str, TrajectoryRecord] = {}
    for attributes, end_time, trace_id in items:
        if spans.is_tito_span(attributes) and attributes[spans.TRAJECTORY_ID] in wanted:
            for record in assembler.add(spans.decode_span(attributes, end_time), trace_id=trace_id):
                records[record.trajectory_id] = record
    for record in assembler.flush():
        records[record.trajectory_id] = record
    return records


def from_memory(exporter: InMemorySpanExporter) -> list[tuple[dict[str, Any], int, str]]:
    return [
        (dict(s.attributes or {}), s.end_time or 0, format(s.context.trace_id, "032x"))
        for s in exporter.get_finished_spans()
    ]


def assert_same(assembled: Trajectory, original: Trajectory) -> None:
    """Token for token; logprobs at the float32 precision spans carry."""
    assert assembled.token_ids == original.token_ids
    assert assembled.loss_mask == original.loss_mask
    assert assembled.segment_info == original.segment_info
    assert assembled.crc32 == original.crc32
    assert [(t.prompt_length, t.output_length, t.finish_reason) for t in assembled.turns] == [
        (t.prompt_length, t.output_length, t.finish_reason) for t in original.turns
    ]
    # What the server said of each call travels too: unknown cached tokens stay unknown (None), not 0.
    assert [(t.cached_tokens, t.latency_s) for t in assembled.turns] == [
        (t.cached_tokens, t.latency_s) for t in original.turns
    ]
    for got, want in zip(assembled.logprobs, original.logprobs, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert np.float32(got) == np.float32(want)


def emit_turn_spans(provider: TracerProvider, trajectory: Trajectory) -> None:
    """A trajectory's turn spans, through ``provider``."""
    tracer = provider.get_tracer("t")
    for attributes in turn_attribute_sets(trajectory):
        tracer.start_span("chat", attributes=attributes).end()


def make_trajectory(turns: int, tokens: int = 50) -> Trajectory:
    t = Trajectory()
    for k in range(turns):
        t.append_turn(
            list(range(k, k + tokens)), list(range(tokens)), output_logprobs=[-0.5] * tokens, finish_reason="stop"
        )
    return t
