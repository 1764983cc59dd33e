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
from typing import Any, ForwardRef, Literal, TypedDict, cast

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


class WeightVersionRun(TypedDict):
    """Which weights sampled output tokens ``[start, end)`` of a turn (SGLang's and vLLM's own form)."""

    version: str
    start: int
    end: int


class TurnEntry(TypedDict):
    """One entry of a record's ``turns``: what the token arrays do not say about a model call of a turn record."""

    index: int
    prompt_start: int
    prompt_length: int
    output_length: int
    finish_reason: str
    matched_stop: str | None
    prompt_tokens: int
    cached_tokens: int | None
    """Prompt tokens the server's prefix cache served; None when the server did not report it."""
    latency_s: float | None
    request_id: str | None
    weight_version: str | None
    weight_versions: list[WeightVersionRun]
    images: int
    """How many of the record's ``image_data`` this turn's new prompt added."""


class CallEntry(TypedDict):
    """One entry of a record's ``calls``: an OpenAI-compatible call exactly as served (call records only)."""

    index: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float | None] | None
    finish_reason: str
    request_id: str | None


class PrefixCheckEntry(TypedDict):
    """One entry of a record's ``prefix_report``: whether call ``index``'s prompt extends call ``index - 1``."""

    index: int
    shares_prefix: bool
    expected_length: int
    divergence: int | None


class TopPRows(TypedDict):
    """Top-p replay over a whole trajectory: token i kept ``token_ids[offsets[i]:offsets[i + 1]]``."""

    token_ids: list[int]
    offsets: list[int]


class TokenFields(TypedDict):
    """The token part of a record, as ``Trajectory.to_dict()`` gives it."""

    trajectory_id: str
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float | None] | None
    segments: list[list[int]]
    turns: list[TurnEntry]
    image_data: list[str]
    routed_experts: str | None
    top_p: TopPRows | None


class RecordHeader(TypedDict):
    """What a record says about its trajectory besides the tokens (see :data:`RECORD_FIELDS` for each field)."""

    trajectory_id: str
    complete: bool
    reason: str | None
    model_id: str | None
    episode_id: str | None
    sample_index: int
    parent_trajectory_id: str | None
    agent_id: str | None
    agent_name: str | None
    invocation_index: int
    purpose: str | None
    node: dict[str, Any] | None
    reward: float | None
    rewards: list[float]
    trace_ids: list[str]
    resource: dict[str, Any]
    tool_parse_errors: list[dict[str, str]]
    prefix_consistent: bool | None
    merged_calls: int
    calls: list[CallEntry]
    prefix_report: list[PrefixCheckEntry]


class ExportedRecord(RecordHeader, TokenFields):
    """One exported trajectory record: a JSONL line, a Parquet row, what every exporter is given.

    Its keys, in order, are :data:`RECORD_KEYS` (the header's, then the token fields').
    """


@dataclass(frozen=True)
class RecordField:
    """One field of the exported record.

    Attributes:
        name: The JSONL key and the Parquet column.
        parquet: Its Parquet storage (:data:`ParquetType`).
        default: What a reader assumes when an older record lacks it.
        doc: What it holds.
    """

    name: str
    parquet: ParquetType
    default: Any
    doc: str

    @property
    def type(self) -> str:
        """Its JSON value, as the Python type :class:`ExportedRecord` declares."""
        annotation = ExportedRecord.__annotations__[self.name]
        return annotation.__forward_arg__ if isinstance(annotation, ForwardRef) else str(annotation)


#: The record's fields in the order of a JSONL line (``TrajectoryRecord.to_dict()``) and of the Parquet columns.
RECORD_FIELDS: tuple[RecordField, ...] = (
    RecordField("trajectory_id", "string", "", "the trajectory's id"),
    RecordField("complete", "bool", False, "every turn or call arrived and chained up exactly"),
    RecordField("reason", "string", None, "why the record is incomplete"),
    RecordField("model_id", "string", None, "the model that served it"),
    # Lineage, one set of fields for every multi-agent shape: the episode (all agents of one task), the sample within
    # it (0; a later context rewrite of the same agent counts up) and the trajectory whose agent started this one.
    RecordField("episode_id", "string", None, "the episode: every agent of one task shares it"),
    RecordField("sample_index", "int64", 0, "which sample of its agent in the episode (0: the first)"),
    RecordField("parent_trajectory_id", "string", None, "the trajectory whose agent started it"),
    RecordField("agent_id", "string", None, "the agent's id (gen_ai.agent.id)"),
    RecordField("agent_name", "string", None, "the agent's name (gen_ai.agent.name)"),
    RecordField("invocation_index", "int64", 0, "which trajectory of its agent in the episode (0: the first)"),
    RecordField("purpose", "string", None, "null: the agent's turns; summary / outside_turn: a call it made aside"),
    RecordField("node", "json", None, "Graph/Swarm node: kind, run_id, node_id, step, inputs (nodes that fed it)"),
    RecordField("reward", "float64", None, "the last reward recorded"),
    RecordField("rewards", "list<float64>", [], "every reward, in the order recorded"),
    RecordField("trace_ids", "list<string>", [], "the traces holding its turns, calls and rewards"),
    RecordField("resource", "json", {}, "the OTel resource attributes of its spans"),
    RecordField("tool_parse_errors", "json", [], "tool calls the parser could not read"),
    RecordField("prefix_consistent", "bool", None, "call records: every call extends the previous one"),
    RecordField("merged_calls", "int64", 0, "call records: how many calls the token fields merge"),
    RecordField("calls", "json", [], "call records: every call exactly (CALL_FIELDS)"),
    RecordField("prefix_report", "json", [], "call records: the prefix check per pair"),
    RecordField("token_ids", "list<int32>", [], "prompt and output tokens of every turn, in order"),
    RecordField("loss_mask", "list<int8>", [], "1 for generated tokens, 0 for the rest"),
    RecordField(
        "logprobs",
        "list<float64>",
        [],
        "per token, real at every output token (None only at prompt tokens); null: recorded without logprobs",
    ),
    RecordField("segments", "segments", [], "(is_output 0/1, length) runs of loss_mask"),
    RecordField("turns", "json", [], "per turn: lengths, finish reason, request id, ..."),
    RecordField("image_data", "list<string>", [], "every prompt image in order, as base64 data URLs"),
    RecordField("routed_experts", "string", None, "MoE routing: base64 .npy (len - 1, layers, top_k), uint8/16"),
    RecordField("top_p", "json", None, "top-p replay: token_ids and offsets per token"),
)
RECORD_KEYS = tuple(f.name for f in RECORD_FIELDS)
#: The fields that place a record in its episode (what an exporter that posts events per record repeats on each).
LINEAGE_FIELDS = (
    "episode_id",
    "sample_index",
    "parent_trajectory_id",
    "agent_id",
    "agent_name",
    "invocation_index",
    "purpose",
    "node",
)

#: The keys of each entry of a record's ``calls`` (one OpenAI-compatible call exactly as served).
CALL_FIELDS = tuple(CallEntry.__annotations__)


def record_from_json(text: str | bytes) -> ExportedRecord:
    """A record from the JSON text a writer made of it (a JSONL line, the collector's outbox)."""
    record: ExportedRecord = json.loads(text)
    return record


def record_from_row(row: Mapping[str, Any]) -> ExportedRecord:
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
    return cast(ExportedRecord, record)


# -- JSONL -----------------------------------------------------------------------------------------------------------


def jsonl_bytes(records: Iterable[Mapping[str, Any]]) -> bytes:
    """Records as JSON Lines (compact, one record a line, NaN refused): what every JSONL writer writes."""
    return "".join(json.dumps(r, separators=(",", ":"), allow_nan=False, default=str) + "\n" for r in records).encode()
