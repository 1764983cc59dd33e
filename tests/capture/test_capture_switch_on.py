"""Capture switched on by environment variables alone, no code change.

Each test starts the unchanged demo agent (src/strands_tito/testing/demo_agent.py) in a real subprocess with only
environment variables set, against a local engine and real OTLP/HTTP receivers on 127.0.0.1 in the test process, and
checks that the trajectory put back together from what was exported equals, token for token, what the engine received
and produced, and that it is complete (its end signal came at process exit).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord
from strands_tito.capture import recorder as capture
from strands_tito.capture.sampler import ENV_SPANS
from strands_tito.capture.switch_on import (
    CONTENT_OFF,
    ENV_OUTPUT,
    ENV_SPAN_CONTENT,
    CaptureRequest,
    keep_content_off_spans,
    parse_capture,
)
from strands_tito.otlp import ReceivedSpan
from strands_tito.testing.engine import EngineRecord, Fault, LocalEngine, Reply, Script
from strands_tito.trajectory import Trajectory

from ..helpers.agents import generate_records, hermes_call

ROOT = Path(__file__).resolve().parents[2]
AGENT = ("-m", "strands_tito.testing.demo_agent")
OTEL_INSTRUMENT = str(Path(sys.executable).parent / "opentelemetry-instrument")
AGL_KEY = "agl-key-5f0c1d9e7b"  # must appear in no byte of telemetry
ENV_CAPTURE_JSONL = "STRANDS_TITO_CAPTURE=jsonl:PATH"  # what replaces the deprecated STRANDS_TITO_OUTPUT
AGL_ENV = {"AGL_EVENT_URL": "http://127.0.0.1:9/api/rollouts/ro-42/attempt/att-3/events", "AGL_KEY": AGL_KEY}
AGL_RESOURCE = {capture.AGL_ROLLOUT_ID: "ro-42", capture.AGL_ATTEMPT_ID: "att-3"}
DISTRO_ENV = {
    "OTEL_TRACES_EXPORTER": "otlp",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}
TIMEOUT = 60


@pytest.fixture
def engine(start_engine: Callable[..., LocalEngine]) -> LocalEngine:
    """One tool call, then the answer."""
    return start_engine(Script(turns=[Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]))


def run(
    env: dict[str, str], *args: str, instrument: bool = False, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """A Python subprocess with a clean capture environment plus ``env``."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "AGL_"))
        and k not in (capture.ENV_CAPTURE, capture.ENV_ENCODING, ENV_SPAN_CONTENT, "PYTHONPATH")
    }
    command = [OTEL_INSTRUMENT, sys.executable, *args] if instrument else [sys.executable, *args]
    return subprocess.run(command, env={**clean, **env}, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def run_agent(engine: LocalEngine, env: dict[str, str], *args: str, instrument: bool = False) -> str:
    done = run({"SGLANG_URL": engine.base_url, **env}, *AGENT, *args, instrument=instrument)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "42" in done.stdout
    return done.stderr


def assemble(items: list[tuple[dict[str, Any], int, str, dict[str, Any]]]) -> TrajectoryRecord:
    """The one trajectory among (attributes, end time, trace id, resource) items."""
    assembler = TrajectoryAssembler()
    records = [
        record
        for attributes, end_time, trace_id, resource in items
        if spans.is_tito_span(attributes)
        for record in assembler.add(spans.decode_span(attributes, end_time), trace_id=trace_id, resource=resource)
    ]
    records += assembler.flush()
    assert len(records) == 1, [(r.trajectory_id, r.reason) for r in records]
    return records[0]


def assert_matches_engine(trajectory: Trajectory, records: list[EngineRecord]) -> None:
    """Token for token what the engine received and produced, call by call; logprobs as float32, as spans carry them."""
    assert len(records) == len(trajectory.turns) > 0
    for turn, record in zip(trajectory.turns, records, strict=True):
        end = turn.output_start + turn.output_length
        assert record.input_ids == trajectory.token_ids[: turn.output_start], f"turn {turn.index}: prompt differs"
        assert record.output_ids == trajectory.token_ids[turn.output_start : end], f"turn {turn.index}: output differs"
        assert np.array_equal(
            np.float32(record.output_logprobs), np.float32(trajectory.logprobs[turn.output_start : end])
        )
        assert all(trajectory.loss_mask[turn.output_start : end])
        assert not any(trajectory.loss_mask[turn.prompt_start : turn.output_start])
    assert (records[-1].input_ids or []) + (records[-1].output_ids or []) == trajectory.token_ids


def assert_exact(received: list[ReceivedSpan], engine: LocalEngine) -> TrajectoryRecord:
    """The exported spans put back together equal what the engine saw, and the trajectory ended at exit."""
    record = assemble([(s.attributes, s.end_time_unix_nano, s.trace_id, s.resource) for s in received])
    assert record.complete, record.reason
    assert_matches_engine(record.trajectory, generate_records(engine))
    [end] = [s for s in received if s.name == spans.SPAN_END]
    assert end.attributes[spans.END_REASON] == "exit"
    return record


def assert_agentlightning(received: list[ReceivedSpan], bodies: list[bytes]) -> None:
    assert received
    for span in received:
        assert AGL_RESOURCE.items() <= span.resource.items(), span.resource
    assert all(AGL_KEY.encode() not in body for body in bodies)


# -- (a) opentelemetry-instrument -------------------------------------------------------------------------------------


def test_opentelemetry_instrument_with_the_distro(engine, otlp_sinks) -> None:  # type: ignore[no-untyped-def]
    sink = otlp_sinks()
    env = {**DISTRO_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_SERVICE_NAME": "calc-agent", **AGL_ENV}
    run_agent(engine, env, instrument=True)
    received = sink.spans()
    assert_exact(received, engine)
    assert {"invoke_agent Strands Agents", "chat", "execute_tool add"} <= {s.name for s in received}
    assert all(s.resource["service.name"] == "calc-agent" for s in received)
    assert_agentlightning(received, sink.bodies)
    # The configurator's exporter is the only one: STRANDS_TITO_CAPTURE=otlp would not double it (next test).
    assert len({s.span_id for s in received}) == len(received)


def test_opentelemetry_instrument_without_a_distro_installs_the_exporter(engine, otlp_sinks) -> None:  # type: ignore[no-untyped-def]
    # No distro and no configurator get loaded (as if opentelemetry-distro were not installed): the instrumentor
    # installs the provider itself, when the agent is built, with the OTLP exporter the protocol variable picks.
    sink = otlp_sinks()
    env = {
        "OTEL_PYTHON_DISTRO": "none-installed",
        "OTEL_PYTHON_CONFIGURATOR": "none-installed",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url,
        capture.ENV_CAPTURE: "otlp",  # also asked for by the variable: still one exporter
        **AGL_ENV,
    }
    run_agent(engine, env, instrument=True)
    received = sink.spans()
    assert_exact(received, engine)
    assert len({s.span_id for s in received}) == len(received)
    assert_agentlightning(received, sink.bodies)
    assert {s.name for s in received} == {spans.SPAN_TURN, spans.SPAN_END}  # the provider capture installed


# -- (b) STRANDS_TITO_CAPTURE -----------------------------------------------------------------------------------------


def test_strands_tito_capture_otlp(engine, otlp_sinks) -> None:  # type: ignore[no-untyped-def]
    sink = otlp_sinks()
    # The fixed interface: STRANDS_TITO_CAPTURE=1 exports with the standard OTLP variables when an endpoint is set.
    run_agent(engine, {capture.ENV_CAPTURE: "1", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, **AGL_ENV})
    received = sink.spans()
    assert_exact(received, engine)
    assert len({s.span_id for s in received}) == len(received)
    assert_agentlightning(received, sink.bodies)
    # capture's own provider records only what capture reads: the chat spans and its end signal, in one trace
    assert {s.name for s in received} == {spans.SPAN_TURN, spans.SPAN_END}
    assert len({s.trace_id for s in received if s.name == spans.SPAN_TURN}) == 1


@pytest.mark.parametrize(
    ("env", "all_spans"),
    [({ENV_SPANS: "all"}, True), ({"OTEL_TRACES_SAMPLER": "always_on"}, True), ({ENV_SPANS: "capture"}, False)],
    ids=["all", "users-sampler", "capture"],
)
def test_capture_provider_records_every_span_when_asked(engine, otlp_sinks, env, all_spans) -> None:  # type: ignore[no-untyped-def]
    """STRANDS_TITO_SPANS=all (or a sampler the user named) keeps Strands' agent, cycle and tool spans too."""
    sink = otlp_sinks()
    run_agent(engine, {capture.ENV_CAPTURE: "1", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, **env})
    received = sink.spans()
    assert_exact(received, engine)
    strands_spans = {"invoke_agent Strands Agents", "execute_event_loop_cycle", "execute_tool add"}
    assert (strands_spans <= {s.name for s in received}) is all_spans


def test_strands_tito_capture_attaches_to_the_apps_own_telemetry(engine, otlp_sinks, tmp_path) -> None:  # type: ignore[no-untyped-def]
    app_sink, tito_sink = otlp_sinks(), otlp_sinks()
    out = tmp_path / "trajectories.jsonl"
    env = {capture.ENV_CAPTURE: f"1,jsonl:{out}", "OTEL_EXPORTER_OTLP_ENDPOINT": tito_sink.url, **AGL_ENV}
    stderr = run_agent(engine, env, "--app-telemetry", f"{app_sink.url}/v1/traces")
    assert "Overriding of current TracerProvider" not in stderr
    # The application's exporter still gets its spans, from its own provider (StrandsTelemetry's resource) ...
    app_spans = app_sink.spans()
    assert "chat" in {s.name for s in app_spans}
    assert all(s.resource["service.name"] == "strands-agents" for s in app_spans)
    # ... and strands-tito's go where STRANDS_TITO_CAPTURE says: to its OTLP endpoint and to the JSONL file.
    tito_spans = tito_sink.spans()
    assert {(s.trace_id, s.span_id) for s in tito_spans} == {(s.trace_id, s.span_id) for s in app_spans}
    record = assert_exact(tito_spans, engine)
    assert_agentlightning(tito_spans, tito_sink.bodies + app_sink.bodies)
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["complete"] is True and line["trajectory_id"] == record.trajectory_id
    assert line["token_ids"] == record.trajectory.token_ids and line["loss_mask"] == record.trajectory.loss_mask
    assert AGL_RESOURCE.items() <= line["resource"].items()
    assert AGL_KEY not in out.read_text()


def test_strands_tito_capture_jsonl_only(engine, otlp_sinks, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sink = otlp_sinks()
    out = tmp_path / "run" / "trajectories.jsonl"
    # No OTLP endpoint set: the file alone, nothing exported (the sink's address is only in a variable the exporter
    # would use if it existed). The deprecated STRANDS_TITO_OUTPUT still works, with one line naming its replacement.
    stderr = run_agent(engine, {capture.ENV_CAPTURE: "1", ENV_OUTPUT: str(out), "SINK_UNUSED": sink.url})
    [warning] = [line for line in stderr.splitlines() if ENV_OUTPUT in line]
    assert warning == f"strands-tito: {ENV_OUTPUT} is deprecated and goes in the next release; set {ENV_CAPTURE_JSONL}"
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["complete"] is True, line["reason"]
    records = generate_records(engine)
    assert line["token_ids"] == (records[-1].input_ids or []) + (records[-1].output_ids or [])
    outputs = [i for i, masked in zip(line["token_ids"], line["loss_mask"], strict=True) if masked]
    assert outputs == [i for r in records for i in r.output_ids or []]
    assert sink.bodies == []  # embedded: nothing leaves the process


def test_the_exit_handler_runs_once(engine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Capture switched on and a captured turn both register the exit handler: it still runs once, and the record is
    complete (it ran before the provider shut down)."""
    out = tmp_path / "trajectories.jsonl"
    debug = (
        "import logging, runpy, sys; handler = logging.StreamHandler(sys.stderr); "
        "handler.setFormatter(logging.Formatter('%(name)s %(message)s')); "
        "log = logging.getLogger('strands_tito.capture.recorder'); log.setLevel(logging.DEBUG); "
        "log.addHandler(handler); "
        "runpy.run_module('strands_tito.testing.demo_agent', run_name='__main__')"
    )
    done = run({"SGLANG_URL": engine.base_url, capture.ENV_CAPTURE: f"jsonl:{out}"}, "-c", debug)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stderr.count("ending open trajectories and flushing") == 1, done.stderr[-4000:]
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["complete"] is True, line["reason"]


SEEDED_RUN = """
import gc, random, sys
from strands_tito.capture.deferred import run_released_calls
from strands_tito.testing import demo_agent

random.seed(20261126)
seeded = random.getstate()
agent = demo_agent.main([])
del agent
gc.collect()
run_released_calls()  # the end signal, had capture's thread not sent it yet
sys.exit(0 if random.getstate() == seeded else 3)
"""


def test_capture_leaves_the_global_random_state_alone(start_engine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An experiment seeds ``random`` for its own draws: an agent run with capture on (every Strands span recorded
    by the provider capture installs, a retried 503, the end signal sent from capture's thread) draws nothing from
    it. OpenTelemetry's default id generator and a jitter on the module's functions each did."""
    engine = start_engine(
        Script(turns=[Fault.http(503), Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")])
    )
    out = tmp_path / "trajectories.jsonl"
    env = {"SGLANG_URL": engine.base_url, capture.ENV_CAPTURE: f"jsonl:{out}", "OTEL_TRACES_SAMPLER": "always_on"}
    done = run(env, "-c", SEEDED_RUN)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r.status for r in engine.records if r.path == "/generate"] == [503, 200, 200]
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["complete"] is True, line["reason"]


# -- message text on Strands' spans -----------------------------------------------------------------------------------

PROMPT_TEXT = "What is 25 + 17? Use the add tool."


def chat_span_texts(bodies: list[bytes]) -> list[list[str]]:
    """Per exported ``chat`` span: every string value of its attributes and events."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = []
    for body in bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if span.name != "chat":
                        continue
                    pairs = [*span.attributes, *(kv for event in span.events for kv in event.attributes)]
                    out.append([kv.value.string_value for kv in pairs if kv.value.HasField("string_value")])
    return out


@pytest.mark.parametrize(
    ("env", "content_on_spans"),
    [
        ({}, False),  # capture on: Strands' own redaction switch keeps the conversation text off
        ({ENV_SPAN_CONTENT: "1"}, True),  # asked to keep it (deprecated: the next line is its replacement)
        ({"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}, True),
        ({"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_tool_definitions"}, True),  # the user's own value is left alone
    ],
)
def test_conversation_text_is_off_spans_unless_asked(engine, otlp_sinks, env, content_on_spans) -> None:  # type: ignore[no-untyped-def]
    sink = otlp_sinks()
    run_agent(engine, {capture.ENV_CAPTURE: "1", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, **env})
    assert_exact(sink.spans(), engine)  # the token data is there either way
    chats = chat_span_texts(sink.bodies)
    assert len(chats) == 2
    for texts in chats:
        assert any(PROMPT_TEXT in t for t in texts) is content_on_spans, texts
        assert ("[REDACTED]" in texts) is not content_on_spans
    assert any(PROMPT_TEXT.encode() in body for body in sink.bodies) is content_on_spans


def test_content_setting_respects_the_users_value() -> None:
    env: dict[str, str] = {}
    assert keep_content_off_spans(env) and env == {"OTEL_SEMCONV_STABILITY_OPT_IN": CONTENT_OFF}
    assert "gen_ai_unredacted_attributes=" in CONTENT_OFF.split(",")
    env = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
    assert not keep_content_off_spans(env) and env["OTEL_SEMCONV_STABILITY_OPT_IN"] == "gen_ai_latest_experimental"
    env = {ENV_SPAN_CONTENT: "true"}
    assert not keep_content_off_spans(env) and "OTEL_SEMCONV_STABILITY_OPT_IN" not in env


# -- off, and failing loudly ------------------------------------------------------------------------------------------


def test_unset_imports_nothing_and_exports_nothing(engine, otlp_sinks) -> None:  # type: ignore[no-untyped-def]
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith(('strands', 'opentelemetry'))))"
    done = run({}, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['strands_tito_startup']"]  # the hook ran, and imported nothing
    sink = otlp_sinks()
    run_agent(engine, {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, capture.ENV_CAPTURE: ""})
    assert sink.bodies == []


@pytest.mark.parametrize(
    ("env", "instrument", "variable"),
    [
        (
            {capture.ENV_CAPTURE: "otlp", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "16"},
            False,
            "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
        ),
        ({**DISTRO_ENV, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "16"}, True, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
        ({capture.ENV_CAPTURE: "otlp,bogus"}, False, capture.ENV_CAPTURE),
        ({capture.ENV_CAPTURE: "otlp", ENV_SPANS: "some"}, False, ENV_SPANS),
    ],
    ids=["limit-variable", "limit-instrument", "bad-value", "bad-spans"],
)
def test_bad_settings_stop_the_process_at_start_up(env: dict[str, str], instrument: bool, variable: str) -> None:
    done = run(env, "-c", "print('the program ran')", instrument=instrument)
    assert done.returncode == 78, done.stderr
    assert "the program ran" not in done.stdout
    assert variable in done.stderr and "strands-tito: trace capture cannot start" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("value", [None, "", "0", "off"], ids=["unset", "empty", "0", "off"])
def test_the_start_up_hook_never_stops_a_program_that_did_not_ask_for_capture(value: str | None) -> None:
    # The .pth line runs in every interpreter of the environment: settings capture would refuse, and Agent
    # Lightning's variable, must not stop a program that did not switch capture on, nor load capture.
    env = {"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "16", "AGL_EVENT_URL": "http://127.0.0.1:1/v1/rollouts/r1/attempts/a1"}
    if value is not None:
        env[capture.ENV_CAPTURE] = value
    probe = "import sys; print('the program ran', 'strands_tito.capture' in sys.modules)"
    done = run(env, "-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["the", "program", "ran", "False"]


FIRST_TRACER = (
    "from strands.telemetry.tracer import get_tracer; print('the program ran', flush=True); get_tracer(); print('past')"
)


@pytest.mark.parametrize(
    "env",
    [{capture.ENV_CAPTURE: "1"}, {capture.ENV_CAPTURE: "1", "OTEL_TRACES_EXPORTER": "none"}],
    ids=["no-destination", "exporter-none"],
)
def test_capture_with_nowhere_to_send_stops_before_the_first_agent(env: dict[str, str]) -> None:
    # Not at interpreter start (an application may set up its own provider first), but when Strands creates its
    # tracer with no provider of the application's: one line naming both ways to give capture a destination.
    done = run(env, "-c", FIRST_TRACER)
    assert done.returncode == 78, done.stderr
    assert "past" not in done.stdout
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in done.stderr and ENV_CAPTURE_JSONL.replace("PATH", "") in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_capture_onto_the_apps_own_exporter_needs_no_destination_of_its_own(engine, otlp_sinks) -> None:  # type: ignore[no-untyped-def]
    app_sink = otlp_sinks()
    run_agent(engine, {capture.ENV_CAPTURE: "1"}, "--app-telemetry", f"{app_sink.url}/v1/traces")
    assert_exact(app_sink.spans(), engine)


# -- pieces -----------------------------------------------------------------------------------------------------------


def test_capture_values() -> None:
    assert parse_capture("", {}) == parse_capture("0", {}) == parse_capture("off", {}) == CaptureRequest()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert parse_capture("1", endpoint) == parse_capture(" OTLP ", {}) == CaptureRequest(otlp=True, enabled=True)
    assert parse_capture("1", {}) == CaptureRequest(enabled=True)  # on, but no endpoint: nothing exported
    assert parse_capture("1", {ENV_OUTPUT: "/tmp/o.jsonl"}).jsonl == (Path("/tmp/o.jsonl"),)  # deprecated
    request = parse_capture("jsonl:/tmp/a.jsonl, otlp ,jsonl:/tmp/a.jsonl", {})
    assert request == CaptureRequest(otlp=True, jsonl=(Path("/tmp/a.jsonl"),), enabled=True)
    assert parse_capture("jsonl:rel/t.jsonl", {}).jsonl == (Path.cwd() / "rel" / "t.jsonl",)
    for bad in ("jsonl:", "grpc", "otlp,0"):
        with pytest.raises(capture.CaptureConfigError, match=capture.ENV_CAPTURE):
            parse_capture(bad)


def test_start_up_module_parses_agentlightning_like_capture() -> None:
    import strands_tito_startup as startup

    for url in (
        AGL_ENV["AGL_EVENT_URL"],
        "http://h/api/rollouts/r%2F1/attempt/0/events/",
        "http://h/api/rollouts/r/attempt/0/other",
        "",
    ):
        env = {"AGL_EVENT_URL": url, "AGL_KEY": AGL_KEY, "OTEL_RESOURCE_ATTRIBUTES": ""}
        startup.add_agentlightning_resource(env, url)
        identity = capture.agentlightning_identity(env)
        assert env["OTEL_RESOURCE_ATTRIBUTES"] == ",".join(f"{k}={quote(v, safe='')}" for k, v in identity.items())
    env = {**AGL_ENV, "OTEL_RESOURCE_ATTRIBUTES": f"team=rl,{capture.AGL_ATTEMPT_ID}=kept"}
    startup.add_agentlightning_resource(env, AGL_ENV["AGL_EVENT_URL"])
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == f"team=rl,{capture.AGL_ATTEMPT_ID}=kept,{capture.AGL_ROLLOUT_ID}=ro-42"


def test_the_pth_hook_is_installed_here_and_in_both_wheels(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import site

    import strands_tito_startup

    # This environment's install (an editable one from scripts/bootstrap.sh, or a wheel) put the .pth in place.
    installed = [Path(d) / "strands_tito_startup.pth" for d in site.getsitepackages()]
    assert any(p.is_file() and p.read_text().strip() == "import strands_tito_startup" for p in installed)
    assert sys.modules.get("strands_tito_startup") is strands_tito_startup  # run by the interpreter at start
    # And the builds carry it: the wheel (with the module and the instrumentor entry point) and the editable wheel.
    hatchling_build = pytest.importorskip("hatchling.build")
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        wheel = zipfile.ZipFile(tmp_path / hatchling_build.build_wheel(str(tmp_path)))
        editable = zipfile.ZipFile(tmp_path / "editable" / hatchling_build.build_editable(str(tmp_path / "editable")))
    finally:
        os.chdir(cwd)
    for archive in (wheel, editable):
        assert archive.read("strands_tito_startup.pth").decode().strip() == "import strands_tito_startup"
    assert "strands_tito_startup.py" in wheel.namelist()
    [entry_points] = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[opentelemetry_instrumentor]\nstrands_tito = strands_tito.capture.switch_on:TitoInstrumentor" in text


def test_stock_openai_agent_is_captured_by_the_variable(start_engine, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An unchanged OpenAIModel agent: STRANDS_TITO_CAPTURE=1 records each call's exact token ids."""
    pytest.importorskip("openai")
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("add", a=25, b=17)), Reply(text="25 + 17 = 42.")]), openai_flavor="vllm"
    )
    out = tmp_path / "calls.jsonl"
    env = {capture.ENV_CAPTURE: f"jsonl:{out}", "OPENAI_BASE_URL": engine.base_url + "/v1"}
    done = run(env, str(ROOT / "examples" / "openai_agent.py"))
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(x) for x in out.read_text().splitlines()]
    records = engine.chat_records()
    assert line["complete"] is True and len(line["calls"]) == len(records) == 2
    for call, record in zip(line["calls"], records, strict=True):
        assert call["prompt_ids"] == record.input_ids and call["output_ids"] == record.output_ids
    assert len(line["prefix_report"]) == 1


# -- a collector that cannot be reached, and the spool command --------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_endpoint_is_reported_once_and_the_spool_can_be_resent(engine, otlp_sinks, tmp_path) -> None:  # type: ignore[no-untyped-def]
    spool_dir = tmp_path / "spool"
    wrong = f"http://127.0.0.1:{_closed_port()}"
    env = {
        capture.ENV_CAPTURE: "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": wrong,
        "STRANDS_TITO_SPOOL_DIR": str(spool_dir),
        "STRANDS_TITO_FLUSH_TIMEOUT": "120",  # the exit must not wait for an endpoint known to refuse
    }
    started = time.monotonic()
    stderr = run_agent(engine, env)
    took = time.monotonic() - started
    lines = [line for line in stderr.splitlines() if "strands-tito" in line or "Transient error" in line]
    [reported] = [line for line in lines if "cannot reach the OTLP endpoint" in line]
    assert wrong in reported and "Connection refused" in reported and str(spool_dir) in reported
    assert "strands-tito spool resend --endpoint URL" in reported
    assert not any("Transient error" in line for line in lines), stderr  # no retry noise after the one line
    assert took < 60, took

    cli = [sys.executable, "-m", "strands_tito.cli", "spool", "--dir", str(spool_dir)]
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    [row] = [line for line in listed.splitlines() if line.startswith("unknown_service-")]
    records, span_count, trajectories = (int(v) for v in row.split()[1:4])
    assert records >= 1 and span_count >= 3 and trajectories == 1  # two turns and the end signal

    sink = otlp_sinks()
    resent = subprocess.run(
        [*cli, "resend", "--endpoint", sink.url], capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    assert f"sent {records} record(s) to {sink.url}/v1/traces" in resent.stdout
    assert_exact(sink.spans(), engine)
    listed = subprocess.run([*cli, "list"], capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    assert listed.startswith("nothing spooled"), listed
