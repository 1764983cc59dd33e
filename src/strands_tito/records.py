"""The exported record, defined once: its fields, their types, how each is stored in Parquet, and how it is written.

Every reader and writer of trajectory records takes its field list from here: the assembler's
``TrajectoryRecord.to_dict`` (the JSONL line), the Parquet exporter (one column per field), the viewer (reading either
back) and the Agent Lightning exporter. Also defined once here, because the agent side, the collector and the
interpreter start-up hook all need them: the Agent Lightning identity keys.

Bottom layer, and light on purpose: standard library only (``strands_tito_startup`` imports it in Agent Lightning
environments at interpreter start). pyarrow stays an optional import of the Parquet exporter: the Parquet type of
each field is plain data here (:attr:`RecordField.parquet`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# -- Agent Lightning identity ------------------------------------------------------------------------------------------

AGL_ROLLOUT_ID = "agentlightning.rollout_id"
AGL_ATTEMPT_ID = "agentlightning.attempt_id"
#: The resource (and span) attributes that tie a trajectory to an Agent Lightning rollout attempt.
AGL_IDENTITY_KEYS = (AGL_ROLLOUT_ID, AGL_ATTEMPT_ID)
#: Where the ids sit in ``AGL_EVENT_URL``, the events URL Agent Lightning's runner gives each rollout attempt.
AGL_EVENT_URL_PATTERN = re.compile(r"/rollouts/(?P<rollout>[^/]+)/attempt/(?P<attempt>[^/]+)/events/?$")
#: What a rollout or attempt id may be: Agent Lightning's own ids (``ro-…``, ``at-…``) and any plain token. The ids go
#: into URL paths, so a path separator, dot segment, query, fragment, percent escape or control character is refused.
AGL_ID_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:~-]{0,255}")


def agl_identity_error(attributes: Mapping[str, Any]) -> str | None:
    """Why the Agent Lightning ids among ``attributes`` are unusable (not text, or not :data:`AGL_ID_PATTERN`), or
    None when they are absent or fine."""
    for key in AGL_IDENTITY_KEYS:
        value = attributes.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or AGL_ID_PATTERN.fullmatch(value) is None:
            return f"{key} {str(value)[:80]!r} is not an id (letters, digits and . _ : ~ -, at most 256)"
    return None


def agentlightning_identity_of(event_url: str) -> dict[str, str]:
    """Rollout and attempt ids parsed from an ``AGL_EVENT_URL`` value (empty when it does not match)."""
    match = AGL_EVENT_URL_PATTERN.search(event_url)
    if match is None:
        return {}
    return {AGL_ROLLOUT_ID: match.group("rollout"), AGL_ATTEMPT_ID: match.group("attempt")}


# -- the record schema -------------------------------------------------------------------------------------------------

ParquetType = Literal[
    "string",
    "bool",
    "int64",
    "float64",
    "list<int32>",
    "list<int8>",
    "list<float64>",
    "list<string>",
    "segments",
    "json",
]
"""How a field is stored in Parquet: an Arrow type, ``segments`` (a list of ``{is_output: bool, length: int32}``
structs) or ``json`` (nested data as one JSON text, so every part has the same schema)."""


@dataclass(frozen=True)
class RecordField:
    """One field of the exported record.

    Attributes:
        name: The JSONL key and the Parquet column.
        type: Its JSON value, as a Python type.
        parquet: Its Parquet storage (:data:`ParquetType`).
        default: What a reader assumes when an older record lacks it.
        doc: What it holds.
    """

    name: str
    type: str
    parquet: ParquetType
    default: Any
    doc: str


#: The record's fields in the order of a JSONL line (``TrajectoryRecord.to_dict()``) and of the Parquet columns.
RECORD_FIELDS: tuple[RecordField, ...] = (
    RecordField("trajectory_id", "str", "string", "", "the trajectory's id"),
    RecordField("complete", "bool", "bool", False, "every turn or call arrived and chained up exactly"),
    RecordField("reason", "str | None", "string", None, "why the record is incomplete"),
    RecordField("model_id", "str | None", "string", None, "the model that served it"),
    # Lineage, one set of fields for every multi-agent shape: the episode (all agents of one task), the sample within
    # it (0; a later context rewrite of the same agent counts up) and the trajectory whose agent started this one.
    RecordField("episode_id", "str | None", "string", None, "the episode: every agent of one task shares it"),
    RecordField("sample_index", "int", "int64", 0, "which sample of its agent in the episode (0: the first)"),
    RecordField("parent_trajectory_id", "str | None", "string", None, "the trajectory whose agent started it"),
    RecordField("agent_id", "str | None", "string", None, "the agent's id (gen_ai.agent.id)"),
    RecordField("agent_name", "str | None", "string", None, "the agent's name (gen_ai.agent.name)"),
    RecordField("reward", "float | None", "float64", None, "the last reward recorded"),
    RecordField("rewards", "list[float]", "list<float64>", [], "every reward, in the order recorded"),
    RecordField("trace_ids", "list[str]", "list<string>", [], "the traces holding its turns, calls and rewards"),
    RecordField("resource", "dict[str, Any]", "json", {}, "the OTel resource attributes of its spans"),
    RecordField("tool_parse_errors", "list[dict[str, str]]", "json", [], "tool calls the parser could not read"),
    RecordField("prefix_consistent", "bool | None", "bool", None, "call records: every call extends the previous one"),
    RecordField("merged_calls", "int", "int64", 0, "call records: how many calls the token fields merge"),
    RecordField("calls", "list[dict[str, Any]]", "json", [], "call records: every call exactly (CALL_FIELDS)"),
    RecordField("prefix_report", "list[dict[str, Any]]", "json", [], "call records: the prefix check per pair"),
    RecordField("token_ids", "list[int]", "list<int32>", [], "prompt and output tokens of every turn, in order"),
    RecordField("loss_mask", "list[int]", "list<int8>", [], "1 for generated tokens, 0 for the rest"),
    RecordField("logprobs", "list[float | None]", "list<float64>", [], "per token; None where not recorded"),
    RecordField("segments", "list[list[int]]", "segments", [], "(is_output 0/1, length) runs of loss_mask"),
    RecordField("turns", "list[dict[str, Any]]", "json", [], "per turn: lengths, finish reason, request id, ..."),
    RecordField("image_data", "list[str]", "list<string>", [], "every prompt image in order, as base64 data URLs"),
    RecordField(
        "routed_experts", "str | None", "string", None, "MoE routing: base64 .npy (len - 1, layers, top_k), uint8/16"
    ),
    RecordField("top_p", "dict[str, list[int]] | None", "json", None, "top-p replay: token_ids and offsets per token"),
)
RECORD_KEYS = tuple(f.name for f in RECORD_FIELDS)

#: The keys of each entry of a record's ``calls`` (one OpenAI-compatible call exactly as served).
CALL_FIELDS = ("index", "prompt_ids", "output_ids", "output_logprobs", "finish_reason", "request_id")


def record_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A record as its JSONL line has it, from a Parquet row (``pyarrow.Table.to_pylist()`` entry).

    Columns an older part lacks get the field's default.
    """
    record: dict[str, Any] = {}
    for f in RECORD_FIELDS:
        value = row.get(f.name, f.default)
        if f.parquet == "json" and isinstance(value, str):
            value = json.loads(value)
        elif f.parquet == "segments" and value is not None:
            value = [[int(s["is_output"]), s["length"]] for s in value]
        record[f.name] = value
    return record


# -- JSONL -----------------------------------------------------------------------------------------------------------


def jsonl_bytes(records: Iterable[Mapping[str, Any]]) -> bytes:
    """Records as JSON Lines (compact, one record a line, NaN refused): what every JSONL writer writes."""
    return "".join(json.dumps(r, separators=(",", ":"), allow_nan=False, default=str) + "\n" for r in records).encode()
