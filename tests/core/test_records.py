"""The exported record is defined once (``strands_tito.records``): assembler, JSONL, Parquet and viewer agree."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from strands_tito import records
from strands_tito.assembly import TrajectoryRecord, build_call_record
from strands_tito.exporters.jsonl import JsonlExporter
from strands_tito.spans import CallSpan, EndSpan
from strands_tito.trajectory import Trajectory, pack_int32
from strands_tito.viewer import read_records

IMAGE = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(16)).decode()


def token_record() -> dict[str, Any]:
    """A token trajectory of two turns with an image, rewards, a resource and a tool-parse error."""
    trajectory = Trajectory(trajectory_id="tok-1")
    trajectory.append_turn(
        [1, 7, 2], [3, 4], finish_reason="stop", output_logprobs=[-0.5, -0.25], image_data=[IMAGE], image_token_id=7
    )
    trajectory.append_turn([5, 6], [8], finish_reason="length", output_logprobs=[-0.25], cached_tokens=5)
    record = TrajectoryRecord(
        trajectory_id="tok-1",
        trajectory=trajectory,
        complete=True,
        rewards=[0.5, 1.0],
        model_id="m",
        trace_ids=["ab" * 16],
        resource={records.AGL_ROLLOUT_ID: "ro-1", records.AGL_ATTEMPT_ID: "at-1", "service.name": "agent"},
        tool_parse_errors=[{"raw": "<tool_call>x", "error": "bad"}],
    )
    return record.to_dict()


def call_record() -> dict[str, Any]:
    """A stock-OpenAI call trajectory of three calls; the third re-renders the history (a prefix break)."""
    calls = {
        0: CallSpan("call-1", 0, [1, 2, 3], [4, 5], [-0.1, -0.2], "tool_calls", "m", "req-0"),
        1: CallSpan("call-1", 1, [1, 2, 3, 4, 5, 6], [7], [-0.4], "stop", "m", "req-1"),
        2: CallSpan("call-1", 2, [1, 2, 9], [10], [-0.3], "stop", "m", None),
    }
    length, crc = 0, 0
    for call in calls.values():
        length += len(call.prompt_ids) + len(call.output_ids)
        crc = zlib.crc32(pack_int32(call.output_ids), zlib.crc32(pack_int32(call.prompt_ids), crc))
    end = EndSpan("call-1", "reset", 3, length, crc, unit="calls")
    record = build_call_record("call-1", calls, end, [], None)
    assert record.complete and record.merged_calls == 2 and record.prefix_consistent is False
    return record.to_dict()


RECORDS = {"token": token_record, "calls": call_record}


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_the_schema_lists_exactly_what_the_assembler_writes(kind: str) -> None:
    assert tuple(RECORDS[kind]()) == records.RECORD_KEYS


def test_call_entries_have_the_call_fields() -> None:
    assert all(tuple(call) == records.CALL_FIELDS for call in call_record()["calls"])


def test_the_typed_record_is_the_schema_and_the_assembler_writes_its_entries() -> None:
    """One schema: the TypedDicts every exporter is typed with list exactly the fields, in order, and the entries."""
    assert tuple(records.ExportedRecord.__annotations__) == records.RECORD_KEYS
    assert {f.name: f.type for f in records.RECORD_FIELDS}["calls"] == "list[CallEntry]"
    token, calls = token_record(), call_record()
    assert all(tuple(turn) == tuple(records.TurnEntry.__annotations__) for turn in token["turns"])
    assert tuple(calls["prefix_report"][0]) == tuple(records.PrefixCheckEntry.__annotations__)


def write_both(tmp_path: Path, record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Write one record through the JSONL and the Parquet exporter; the JSONL keys and the Parquet columns."""
    pq = pytest.importorskip("pyarrow.parquet")
    from strands_tito.exporters.parquet import ParquetExporter

    jsonl = JsonlExporter(tmp_path / "out.jsonl")
    jsonl.write([record], jsonl.next_position())
    parquet = ParquetExporter(tmp_path / "parquet")
    parquet.write([record], parquet.next_position())
    line = json.loads((tmp_path / "out.jsonl").read_text())
    columns = pq.read_table(next((tmp_path / "parquet").glob("part-*.parquet"))).column_names
    return list(line), list(columns)


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_jsonl_keys_are_the_parquet_columns(tmp_path: Path, kind: str) -> None:
    keys, columns = write_both(tmp_path, RECORDS[kind]())
    assert keys == columns == list(records.RECORD_KEYS)


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_the_viewer_reads_parquet_back_as_the_jsonl_line(tmp_path: Path, kind: str) -> None:
    record = RECORDS[kind]()
    write_both(tmp_path, record)
    from_jsonl = read_records(tmp_path / "out.jsonl")
    assert from_jsonl == [json.loads(json.dumps(record))]
    assert read_records(tmp_path / "parquet") == from_jsonl


def test_a_column_dropped_from_one_side_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above fails when either exporter loses a field."""
    from strands_tito.exporters import parquet

    monkeypatch.setattr(parquet, "RECORD_FIELDS", tuple(f for f in records.RECORD_FIELDS if f.name != "merged_calls"))
    keys, columns = write_both(tmp_path / "a", call_record())
    assert keys != columns
    monkeypatch.undo()
    record = call_record()
    del record["merged_calls"]
    keys, columns = write_both(tmp_path / "b", record)
    assert keys != columns


def test_one_capture_switch_and_one_set_of_agentlightning_keys() -> None:
    import strands_tito_startup as startup
    from strands_tito import settings
    from strands_tito.capture import recorder as capture
    from strands_tito.exporters import agentlightning

    assert startup.ENV_CAPTURE == capture.ENV_CAPTURE == settings.variable("capture").name
    assert capture.AGL_ROLLOUT_ID is agentlightning.AGL_ROLLOUT_ID is records.AGL_ROLLOUT_ID
    assert records.AGL_IDENTITY_KEYS == ("agentlightning.rollout_id", "agentlightning.attempt_id")
    for value in ("0", " off ", "FALSE", "no"):
        assert settings.capture_off(value)
    for value in ("", None, "1", "otlp", "jsonl:/tmp/x.jsonl"):
        assert not settings.capture_off(value)
