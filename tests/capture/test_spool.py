"""The OTLP spool: strands-tito spans survive a collector that is down, slow or gone, and a process restart; past the
hard limit, drops are counted and end up in the end signal, which makes the record say exactly what is missing."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans as schema
from strands_tito.assembly import TrajectoryAssembler
from strands_tito.capture import recorder as capture
from strands_tito.capture.spool import Spool, decode_request, encode_request
from strands_tito.capture.spool_processor import SpoolingSpanProcessor

from ..helpers.capture import emit_turn_spans, make_trajectory
from ..helpers.otlp import end_attributes


class Gate(SpanExporter):
    """An exporter whose collector is up or down at the test's say; keeps what it delivered."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.delivered: list[ReadableSpan] = []
        self.attempts = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.attempts += 1
        if not self.up.is_set():
            time.sleep(0.01)
            return SpanExportResult.FAILURE
        self.delivered.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def assemble(spans: Sequence[ReadableSpan]) -> list[dict[str, object]]:
    assembler = TrajectoryAssembler()
    records = []
    for span in spans:
        attributes = dict(span.attributes or {})
        records += assembler.add(schema.decode_span(attributes, span.end_time or 0))
    records += assembler.flush()
    return [r.to_dict() for r in records]


def test_request_round_trip_keeps_every_field() -> None:
    provider = TracerProvider()
    exporter = Gate()
    exporter.up.set()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    t = make_trajectory(2)
    emit_turn_spans(provider, t)
    with provider.get_tracer("t").start_as_current_span("chat", attributes={"x": [1, 2]}) as span:
        span.add_event("gen_ai.choice", {"message": "hi"})
    payload = encode_request(exporter.delivered)
    again = decode_request(payload)
    assert encode_request(again) == payload


def test_collector_down_then_up_delivers_everything_in_order(tmp_path: Path) -> None:
    gate = Gate()
    processor = SpoolingSpanProcessor(gate, Spool(tmp_path), queue_spans=4, schedule_delay=0.01, max_backoff=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    trajectories = [make_trajectory(3) for _ in range(10)]
    for t in trajectories:
        emit_turn_spans(provider, t)
        provider.get_tracer("t").start_span(schema.SPAN_END, attributes=end_attributes(t)).end()
    deadline = time.monotonic() + 5
    while processor.spilled < 30 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processor.spool.pending_bytes > 0 and not gate.delivered
    gate.up.set()
    assert processor.force_flush(10_000)
    records = assemble(gate.delivered)
    assert len(records) == 10 and all(r["complete"] for r in records)
    assert {r["trajectory_id"]: r["token_ids"] for r in records} == {t.trajectory_id: t.token_ids for t in trajectories}
    assert not list(processor.spool.dir.glob("seg-*"))
    processor.shutdown()
    assert not processor.spool.dir.exists()


def test_turns_wait_for_the_schedule_but_an_end_signal_sends_them_at_once(tmp_path: Path) -> None:
    """Turn spans are batched (one HTTP request costs about 1 ms of client CPU); a trajectory's end signal sends what
    is queued right away, in order, so the collector can write the record without waiting for the schedule."""
    gate = Gate()
    gate.up.set()
    processor = SpoolingSpanProcessor(gate, Spool(tmp_path), schedule_delay=60)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    first, second = make_trajectory(3), make_trajectory(2)
    emit_turn_spans(provider, first)
    time.sleep(0.3)
    assert gate.attempts == 0  # the turns wait for the (long) schedule
    provider.get_tracer("t").start_span(schema.SPAN_END, attributes=end_attributes(first)).end()
    deadline = time.monotonic() + 5
    while len(gate.delivered) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [dict(s.attributes or {}).get(schema.KIND) for s in gate.delivered] == ["turn", "turn", "turn", "end"]
    emit_turn_spans(provider, second)  # the next trajectory's turns wait again
    time.sleep(0.3)
    assert len(gate.delivered) == 4 and gate.attempts == 1
    processor.shutdown()


def test_exit_leaves_the_rest_in_the_spool_and_the_next_process_sends_it(tmp_path: Path) -> None:
    gate = Gate()
    first = SpoolingSpanProcessor(gate, Spool(tmp_path), schedule_delay=0.01, max_backoff=0.05)
    provider = TracerProvider()
    provider.add_span_processor(first)
    t = make_trajectory(4)
    emit_turn_spans(provider, t)
    provider.get_tracer("t").start_span(schema.SPAN_END, attributes=end_attributes(t)).end()
    started = time.monotonic()
    assert not first.force_flush(300)  # bounded: the collector is down
    assert time.monotonic() - started < 2
    first.shutdown()
    assert list(tmp_path.glob("*/seg-*.spool"))

    gate.up.set()
    second = SpoolingSpanProcessor(gate, Spool(tmp_path), schedule_delay=0.01)
    assert second.spool.adopted_bytes > 0
    assert second.force_flush(5_000)
    [record] = assemble(gate.delivered)
    assert record["complete"] and record["token_ids"] == t.token_ids
    second.shutdown()
    assert not tmp_path.exists()  # the key directory goes too once it is empty


def test_past_the_hard_limit_drops_are_counted_and_the_record_names_them(
    tmp_path: Path, provider: TracerProvider, plug: Callable[[SpanProcessor], None]
) -> None:
    gate = Gate()
    processor = SpoolingSpanProcessor(gate, Spool(tmp_path), max_bytes=3000, schedule_delay=0.01, max_backoff=0.05)
    plug(processor)
    t = make_trajectory(6, tokens=100)  # ~1.3 KB a turn span: some fit, the rest cannot
    tracer = provider.get_tracer("t")
    for turn in t.turns:
        with tracer.start_as_current_span("chat"):  # as a provider records each turn inside Strands' chat span
            capture.record_turn(t, turn, model_id=None)
    assert processor.dropped > 0
    capture.end_trajectory(t, "reset")
    gate.up.set()
    assert processor.force_flush(5_000)
    [record] = assemble(gate.delivered)
    assert not record["complete"]
    reason = str(record["reason"])
    assert f"dropped {processor.dropped} span(s)" in reason and "spool" in reason
    [end] = [s for s in gate.delivered if s.name == schema.SPAN_END]
    dropped = list((end.attributes or {})[schema.END_DROPPED_INDICES])  # type: ignore[arg-type]
    delivered_turns = {(s.attributes or {}).get(schema.TURN_INDEX) for s in gate.delivered if s.name == "chat"}
    assert sorted(set(dropped) | delivered_turns) == list(range(6)) and not set(dropped) & delivered_turns
    processor.shutdown()


@pytest.mark.parametrize("torn", [3, 11])
def test_a_torn_last_record_is_skipped(tmp_path: Path, torn: int) -> None:
    spool = Spool(tmp_path)
    spool.append(b"one")
    spool.append(b"two" * 10)
    [segment] = list(spool.dir.glob("seg-*.spool"))
    spool.close()  # its records stay for the next instance; then a write torn as if the process died in it
    with segment.open("ab") as f:
        f.write(b"\x10\x00\x00\x00garbage"[:torn])
    adopted = Spool(tmp_path)
    payloads = []
    while (item := adopted.peek()) is not None:
        payloads.append(item[2])
        adopted.ack(item[0], item[1])
    assert payloads == [b"one", b"two" * 10]
    adopted.close()


class TracedHttpExporter(Gate):
    """An exporter whose HTTP library is instrumented: like every OpenTelemetry HTTP instrumentation (requests,
    urllib3, httpx), it starts a client span per request unless instrumentation is suppressed in the context."""

    def __init__(self, provider: TracerProvider) -> None:
        super().__init__()
        self.tracer = provider.get_tracer("opentelemetry.instrumentation.requests")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if is_instrumentation_enabled():
            self.tracer.start_span("POST", attributes={"http.request.method": "POST"}).end()
        return super().export(spans)


def test_our_own_exports_are_not_traced_by_an_instrumented_http_library(tmp_path: Path) -> None:
    provider = TracerProvider()
    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(seen))
    exporter = TracedHttpExporter(provider)
    exporter.up.set()
    processor = SpoolingSpanProcessor(exporter, Spool(tmp_path), schedule_delay=0.01)
    provider.add_span_processor(processor)
    t = make_trajectory(2)
    emit_turn_spans(provider, t)
    provider.get_tracer("t").start_span(schema.SPAN_END, attributes=end_attributes(t)).end()
    assert processor.force_flush(5_000)
    processor.shutdown()
    assert exporter.attempts >= 1 and len(exporter.delivered) == 3
    assert [span.name for span in seen.get_finished_spans() if span.name == "POST"] == []


def test_the_fork_hook_does_not_keep_a_dropped_processor_alive(tmp_path: Path) -> None:
    processor = SpoolingSpanProcessor(Gate(), Spool(tmp_path))
    processor.shutdown()
    alive = weakref.ref(processor)
    del processor
    deadline = time.monotonic() + 5
    while alive() is not None and time.monotonic() < deadline:  # the sender thread lets go when it ends
        gc.collect()
        time.sleep(0.01)
    assert alive() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process.*is multi-threaded:DeprecationWarning")  # the case under test
def test_a_forked_child_still_runs_the_weak_fork_hook(tmp_path: Path) -> None:
    """The child of a fork exports nothing through its copy of the processor (no sender thread, the parent's spool)."""
    processor = SpoolingSpanProcessor(Gate(), Spool(tmp_path))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    pid = os.fork()
    if pid == 0:  # the child: its span is dropped and counted, not queued for a sender it does not have
        emit_turn_spans(provider, make_trajectory(1))
        os._exit(0 if processor.dropped == 1 else 1)
    _, status = os.waitpid(pid, 0)
    processor.shutdown()
    assert os.waitstatus_to_exitcode(status) == 0
