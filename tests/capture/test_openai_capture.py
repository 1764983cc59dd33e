"""Stock agents: Strands' own ``OpenAIModel`` against the local engine's chat endpoint, with token ids captured.

Every call's recorded prompt and output ids must equal exactly what the engine rendered and generated for it; the
assembler then reports whether consecutive calls share a prefix (they do for canonical replies, and do not when the
re-rendered reply tokenizes differently).
"""

from __future__ import annotations

import gc
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openai")

import openai
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands.models.openai import OpenAIModel

from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord
from strands_tito.capture import recorder as capture
from strands_tito.capture.deferred import run_released_calls
from strands_tito.capture.openai import (
    ENV_FLAVOR,
    call_log_of,
    end_trajectory_of,
    instrument_openai_model,
    is_openai_model_instrumented,
    trajectory_id_of,
    uninstrument_openai_model,
)
from strands_tito.settings import reset_settings
from strands_tito.testing.engine import EngineRecord, LocalEngine, Reply, Script

from ..helpers.agents import IM_END, calculator, hermes_call, make_agent
from ..helpers.capture import assemble, from_memory

PIECES = [27, 14172, 13429, 29]  # "<tool_call>" spelled in plain pieces; a re-render spells it as one token
CALL = hermes_call("calculator", expression="6 * 7")


@pytest.fixture
def instrumented() -> Iterator[None]:
    assert instrument_openai_model()
    assert instrument_openai_model()  # idempotent
    yield
    uninstrument_openai_model()
    assert not is_openai_model_instrumented()


def openai_agent(engine: LocalEngine, *, stream: bool = True, **params: Any) -> Any:
    model = OpenAIModel(
        client_args={"base_url": engine.base_url + "/v1", "api_key": "x", "max_retries": 0},
        model_id="qwen3-local",
        stream=stream,
        params=params or None,
    )
    return make_agent(model, [calculator])  # type: ignore[arg-type]


def ok_records(engine: LocalEngine) -> list[EngineRecord]:
    return [r for r in engine.chat_records() if r.status == 200]


def finish(agent: Any, exporter: InMemorySpanExporter) -> TrajectoryRecord:
    """End the agent's trajectory and assemble it from the exported spans."""
    tid = trajectory_id_of(agent)
    assert tid is not None
    end_trajectory_of(agent)
    return assemble(from_memory(exporter), {tid})[tid]


def assert_calls_match_engine(record: TrajectoryRecord, engine: LocalEngine) -> None:
    """The central assertion: each call is exactly what the engine rendered and produced for it."""
    records = ok_records(engine)
    assert len(record.calls) == len(records) > 0
    for call, seen in zip(record.calls, records, strict=True):
        assert call.prompt_ids == seen.input_ids, f"call {call.index}: prompt differs"
        assert call.output_ids == seen.output_ids, f"call {call.index}: output differs"


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
async def test_calls_are_exact_and_share_the_prefix(start_engine, memory, instrumented, flavor, stream) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text=CALL), Reply(text="It is 42.")]), openai_flavor=flavor)
    agent = openai_agent(engine, stream=stream)
    result = await agent.invoke_async("Compute 6 * 7.")
    assert str(result).strip() == "It is 42."
    tool_results = [b for m in agent.messages for b in m["content"] if "toolResult" in b]
    assert tool_results[0]["toolResult"]["content"] == [{"text": "42"}]  # the real tool ran

    record = finish(agent, memory)
    assert record.complete, record.reason
    assert_calls_match_engine(record, engine)
    assert [c.finish_reason for c in record.calls] == ["tool_calls", "stop"]
    # Not asked for: no logprob attribute on the spans, and no logprob array in the calls or the trajectory.
    assert all(c.output_logprobs is None for c in record.calls) and record.trajectory.logprobs is None
    assert record.prefix_consistent is True and record.merged_calls == 2
    [check] = record.prefix_report
    assert check.shares_prefix and check.divergence is None
    assert check.expected_length == len(record.calls[0].prompt_ids) + len(record.calls[0].output_ids)
    last = ok_records(engine)[-1]
    assert record.trajectory.token_ids == (last.input_ids or []) + (last.output_ids or [])
    assert record.trajectory.segment_info[-1] == (True, len(last.output_ids or []))
    assert record.model_id == "qwen3-local"
    # Lineage and the GenAI ids: a call span names its agent and its conversation (the trajectory).
    assert record.lineage.agent_name == agent.name and record.lineage.agent_id == agent.agent_id
    assert record.lineage.parent_trajectory_id is None and record.lineage.episode_id is not None
    chat = [
        a
        for a, _, _ in from_memory(memory)
        if a.get(spans.TRAJECTORY_ID) == record.trajectory_id and spans.CALL_INDEX in a
    ]
    assert chat and all(a["gen_ai.conversation.id"] == record.trajectory_id for a in chat)
    rejected = [r for r in engine.chat_records() if r.status == 400]
    # SGLang cannot stream token ids: the first streaming call is refused once, then asked without streaming.
    assert len(rejected) == (1 if flavor == "sglang" and stream else 0)
    assert all(r.request["return_token_ids"] is True for r in ok_records(engine))


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
async def test_drift_is_measured_not_lost(start_engine, qwen3, memory, instrumented, flavor) -> None:  # type: ignore[no-untyped-def]
    body = qwen3.encode(CALL[len("<tool_call>") :], add_special_tokens=False)
    engine = start_engine(
        Script([Reply(ids=[*PIECES, *body, IM_END]), Reply(text="It is 42."), Reply(text="Bye.")]),
        openai_flavor=flavor,
    )
    agent = openai_agent(engine)
    await agent.invoke_async("Compute 6 * 7.")
    await agent.invoke_async("Thanks!")  # a second invocation continues the same trajectory
    record = finish(agent, memory)
    assert record.complete, record.reason  # drift is not data loss
    assert_calls_match_engine(record, engine)
    assert len(record.calls) == 3 and len(record.trace_ids) == 2
    first, second = record.calls[0], record.calls[1]
    # The re-render spells "<tool_call>" as one token where the model wrote four: the prompt diverges right there.
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids
    assert second.prompt_ids[len(first.prompt_ids)] == 151657
    assert [(c.index, c.shares_prefix, c.divergence) for c in record.prefix_report] == [
        (1, False, len(first.prompt_ids)),
        (2, True, None),
    ]
    assert record.prefix_consistent is False and record.merged_calls == 1
    assert record.trajectory.token_ids == first.prompt_ids + first.output_ids
    line = record.to_dict()
    assert line["prefix_consistent"] is False and line["merged_calls"] == 1
    assert [c["prompt_ids"] for c in line["calls"]] == [r.input_ids for r in ok_records(engine)]


async def test_thinking_stripped_on_re_render(start_engine, memory, instrumented) -> None:  # type: ignore[no-untyped-def]
    # A server with a reasoning parser returns the thinking apart; Strands does not send it back, so the re-rendered
    # history lacks it.
    engine = start_engine(
        Script([Reply(text="<think>\nSix sevens.\n</think>\n\n" + CALL), Reply(text="It is 42.")]),
        reasoning_parser="qwen3",
    )
    agent = openai_agent(engine)
    await agent.invoke_async("Compute 6 * 7.")
    reasoning = [b for m in agent.messages for b in m["content"] if "reasoningContent" in b]
    assert reasoning and reasoning[0]["reasoningContent"]["reasoningText"]["text"] == "Six sevens."
    record = finish(agent, memory)
    assert record.complete, record.reason
    assert_calls_match_engine(record, engine)
    [check] = record.prefix_report
    assert not check.shares_prefix and check.divergence == len(record.calls[0].prompt_ids)
    assert record.calls[0].output_ids[0] == 151667  # <think>
    assert record.merged_calls == 1


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
async def test_logprobs_when_asked(start_engine, memory, instrumented, flavor, stream) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text=CALL), Reply(text="It is 42.")]), openai_flavor=flavor)
    agent = openai_agent(engine, stream=stream, logprobs=True, top_logprobs=2)
    await agent.invoke_async("Compute 6 * 7.")
    record = finish(agent, memory)
    assert record.complete, record.reason
    for call, seen in zip(record.calls, ok_records(engine), strict=True):
        assert call.output_ids == seen.output_ids
        assert [np.float32(x) for x in call.output_logprobs] == [np.float32(x) for x in seen.output_logprobs or []]
    merged = [x for x in record.trajectory.logprobs if x is not None]
    assert len(merged) == sum(len(c.output_ids) for c in record.calls)


async def test_capture_off_asks_for_nothing(start_engine, memory, instrumented, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(capture.ENV_CAPTURE, "0")
    engine = start_engine(Script([Reply(text=CALL), Reply(text="It is 42.")]), openai_flavor="sglang")
    agent = openai_agent(engine)
    assert str(await agent.invoke_async("Compute 6 * 7.")).strip() == "It is 42."
    requests = [r.request for r in engine.chat_records()]
    assert len(requests) == 2 and all(r["stream"] is True for r in requests)
    assert not any("return_token_ids" in r for r in requests)
    assert trajectory_id_of(agent) is None
    assert not [s for s in memory.get_finished_spans() if spans.is_tito_span(dict(s.attributes or {}))]


async def test_not_instrumented_asks_for_nothing(start_engine, memory) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="Hi.")]))
    agent = openai_agent(engine)
    await agent.invoke_async("Hello")
    assert "return_token_ids" not in engine.chat_records()[0].request
    assert trajectory_id_of(agent) is None


async def test_flavor_setting(start_engine, memory, instrumented, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # sglang: streaming calls go out non-streaming from the start, no refused request.
    monkeypatch.setenv(ENV_FLAVOR, "sglang")
    engine = start_engine(Script([Reply(text=CALL), Reply(text="It is 42.")]), openai_flavor="sglang")
    agent = openai_agent(engine)
    assert str(await agent.invoke_async("Compute 6 * 7.")).strip() == "It is 42."
    assert [(r.status, r.request["stream"]) for r in engine.chat_records()] == [(200, False), (200, False)]
    record = finish(agent, memory)
    assert record.complete and record.prefix_consistent
    assert_calls_match_engine(record, engine)
    # vllm: always stream; an SGLang server's 400 goes to the caller.
    monkeypatch.setenv(ENV_FLAVOR, "vllm")
    reset_settings()  # read once per process: this test changes it midway
    engine = start_engine(Script([Reply(text="Hi.")]), openai_flavor="sglang")
    with pytest.raises(openai.BadRequestError, match="return_token_ids"):
        await openai_agent(engine).invoke_async("Hello")


async def test_user_extra_body_is_kept(start_engine, memory, instrumented) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script([Reply(text="Hi.")]))
    agent = openai_agent(engine, extra_body={"chat_template_kwargs": {"enable_thinking": False}}, max_tokens=50)
    await agent.invoke_async("Hello")
    [seen] = engine.chat_records()
    assert seen.request["chat_template_kwargs"] == {"enable_thinking": False}
    assert seen.request["return_token_ids"] is True and seen.request["max_tokens"] == 50
    record = finish(agent, memory)
    assert record.complete and record.calls[0].prompt_ids == seen.input_ids
    assert record.calls[0].prompt_ids[-4:] == [151667, 271, 151668, 271]  # the empty think block the kwarg adds


async def test_released_agent_ends_its_trajectory_and_jsonl(start_engine, plug, instrumented, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "trajectories.jsonl"
    plug(capture.TrajectorySpanProcessor(out))
    engine = start_engine(Script([Reply(text=CALL), Reply(text="It is 42.")]))
    agent = openai_agent(engine)
    await agent.invoke_async("Compute 6 * 7.")
    log = call_log_of(agent)
    assert log is not None and log.calls == 2
    tid = log.trajectory_id
    capture.record_reward(1.0, agent=agent)
    del agent, log
    gc.collect()  # the per-agent state goes with the agent: its end signal is queued,
    run_released_calls()  # and sent by capture's thread (or here, whichever comes first)
    [line] = [x for x in map(json.loads, out.read_text().splitlines()) if x["trajectory_id"] == tid]
    assert line["complete"] is True and line["prefix_consistent"] is True and line["reward"] == 1.0
    assert [c["prompt_ids"] for c in line["calls"]] == [r.input_ids for r in ok_records(engine)]
    assert [c["output_ids"] for c in line["calls"]] == [r.output_ids for r in ok_records(engine)]
    assert line["token_ids"] == line["calls"][1]["prompt_ids"] + line["calls"][1]["output_ids"]


# -- the assembler on call spans ------------------------------------------------------------------------------------


def _call_spans(encoding: spans.Encoding = "packed") -> list[dict[str, Any]]:
    prompts = [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 9, 7]]
    outputs = [[4, 5], [7, 8], [10]]
    items = [
        spans.call_attributes(
            "t", i, p, o, [-0.5] * len(o), finish_reason="tool_calls", encoding=encoding, model_id="m"
        )
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]
    log_length = sum(len(p) + len(o) for p, o in zip(prompts, outputs, strict=True))
    import zlib

    from strands_tito.trajectory import pack_int32

    crc = 0
    for p, o in zip(prompts, outputs, strict=True):
        crc = zlib.crc32(pack_int32(p + o), crc)
    end = {
        spans.SCHEMA: spans.SCHEMA_VERSION,
        spans.KIND: "end",
        spans.TRAJECTORY_ID: "t",
        spans.END_REASON: "reset",
        spans.END_TURNS: 3,
        spans.END_LENGTH: log_length,
        spans.END_CRC32: crc,
        spans.END_UNIT: "calls",
    }
    return [*items, end]


def _assemble(items: list[dict[str, Any]], assembler: TrajectoryAssembler | None = None) -> TrajectoryRecord:
    assembler = assembler or TrajectoryAssembler()
    done = [r for a in items for r in assembler.add(spans.decode_span(a))]
    done += assembler.flush()
    [record] = done
    return record


@pytest.mark.parametrize("encoding", ["packed", "array"])
def test_assembler_prefix_report(encoding: spans.Encoding) -> None:
    *calls, end = _call_spans(encoding)
    record = _assemble([end, *reversed(calls)])  # any order
    assert record.complete, record.reason
    assert [(c.index, c.shares_prefix, c.divergence) for c in record.prefix_report] == [(1, True, None), (2, False, 5)]
    assert record.prefix_consistent is False and record.merged_calls == 2
    assert record.trajectory.token_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert record.trajectory.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert record.trajectory.logprobs == [None, None, None, -0.5, -0.5, None, -0.5, -0.5]
    assert [t.finish_reason for t in record.trajectory.turns] == ["stop", "stop"]
    assert record.model_id == "m" and len(record.calls) == 3
    assert json.dumps(record.to_dict(), allow_nan=False)


def test_assembler_data_loss_on_calls() -> None:
    *calls, end = _call_spans()
    missing = _assemble([calls[0], calls[2], end])
    assert not missing.complete and "call 1 is missing" in (missing.reason or "")
    assert len(missing.calls) == 1

    assembler = TrajectoryAssembler()
    duplicated = _assemble([calls[0], calls[0], *calls[1:], end], assembler)
    assert duplicated.complete and assembler.stats.duplicates == 1 and assembler.stats.calls == 3

    forged = {**calls[1], spans.OUTPUT_IDS: spans.encode_ids([7, 9], "packed")}
    assembler = TrajectoryAssembler()
    assembler.add(spans.decode_span(calls[1]))
    assert "conflicts" in (assembler.conflict(spans.decode_span(forged)) or "")
    conflicted = _assemble([calls[0], calls[1], forged, calls[2], end])
    assert not conflicted.complete and "different contents" in (conflicted.reason or "")

    wrong_totals = _assemble([*calls, {**end, spans.END_LENGTH: 1}])
    assert not wrong_totals.complete and "end signal says 1 tokens" in (wrong_totals.reason or "")

    no_end = _assemble(calls)
    assert not no_end.complete and "no end signal" in (no_end.reason or "")
    assert no_end.prefix_report and no_end.merged_calls == 2  # what arrived is still reported


def test_call_span_decoding() -> None:
    attributes = spans.call_attributes("t", 0, [1], [2, 3], [-2.0, -1.0], finish_reason="length")
    decoded = spans.decode_span(attributes)
    assert isinstance(decoded, spans.CallSpan)
    assert decoded.output_logprobs == [-2.0, -1.0] and decoded.finish_reason == "length"
    # A generated token without its logprob beside ones with theirs is never training data (strands_tito.checks).
    with pytest.raises(spans.SpanSchemaError, match="missing"):
        spans.decode_span({**attributes, spans.OUTPUT_LOGPROBS: spans.encode_logprobs([None, -1.0], "packed")})
    with pytest.raises(spans.SpanSchemaError, match="differ in length"):
        spans.decode_span({**attributes, spans.OUTPUT_LOGPROBS: spans.encode_logprobs([None], "packed")})
    with pytest.raises(spans.SpanSchemaError, match=r"tito\.call\.index is -1, outside"):
        spans.decode_span({**attributes, spans.CALL_INDEX: -1})
    end = spans.decode_span(_call_spans()[-1])
    assert isinstance(end, spans.EndSpan) and end.unit == "calls"


# -- one validity rule: a reply the provider path would refuse is never recorded, and never raises in the agent ------


class _CraftedChat(BaseHTTPRequestHandler):
    """A vLLM-shaped ``/v1/chat/completions`` that answers every request with the server's ``reply``."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(self.server.reply).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def crafted_reply(output_ids: list[int], logprobs: list[float]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-crafted",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi."},
                "finish_reason": "stop",
                "token_ids": output_ids,
                "logprobs": {"content": [{"token": "x", "logprob": v, "top_logprobs": []} for v in logprobs]},
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": len(output_ids), "total_tokens": 3 + len(output_ids)},
    }


@pytest.fixture
def crafted_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CraftedChat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def crafted_agent(server: ThreadingHTTPServer) -> Any:
    host, port = server.server_address[:2]
    model = OpenAIModel(
        client_args={"base_url": f"http://{host}:{port}/v1", "api_key": "x", "max_retries": 0},
        model_id="m",
        stream=False,
        params={"logprobs": True},
    )
    return make_agent(model, [])  # type: ignore[arg-type]


async def test_an_id_beyond_int32_is_refused_not_raised(crafted_server, memory, instrumented, caplog) -> None:  # type: ignore[no-untyped-def]
    crafted_server.reply = crafted_reply([5, 2**31], [-0.5, -0.25])  # type: ignore[attr-defined]
    agent = crafted_agent(crafted_server)
    assert str(await agent.invoke_async("Hello.")).strip() == "Hi."  # the agent's run is untouched
    assert "call not recorded" in caplog.text and "output token ids are not a list of token ids" in caplog.text
    log = call_log_of(agent)
    assert log is None or not log.calls
    assert not [a for a, _, _ in from_memory(memory) if spans.CALL_INDEX in a]


async def test_vllm_logprob_floor_is_never_recorded_as_a_logprob(crafted_server, memory, instrumented) -> None:  # type: ignore[no-untyped-def]
    crafted_server.reply = crafted_reply([5, 6], [-0.5, -9999.0])  # type: ignore[attr-defined]
    agent = crafted_agent(crafted_server)
    assert str(await agent.invoke_async("Hello.")).strip() == "Hi."
    record = finish(agent, memory)
    [call] = record.calls
    assert call.output_ids == [5, 6]
    assert call.output_logprobs is None and record.trajectory.logprobs is None  # recorded, without invented logprobs
