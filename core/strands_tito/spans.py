"""The span attribute schema (version 1): how a turn, a reward and a trajectory's end travel on OpenTelemetry spans.

See ``docs/span-schema.md``. Encoding lives next to decoding so the two cannot drift apart; both the in-process
(embedded) path and the collector decode with :func:`decode_span`.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from strands_tito import checks
from strands_tito.errors import StrandsTitoError
from strands_tito.records import CallEntry
from strands_tito.replay import ReplayDataError, decode_compact_routing, decode_top_p, replay_attributes
from strands_tito.span_images import ImageSchemaError, SpanImage, decode_images
from strands_tito.span_lineage import Lineage, LineageSchemaError, decode_lineage
from strands_tito.trajectory import pack_int32

SCHEMA_VERSION = 1
PREFIX = "tito."

SCHEMA = PREFIX + "schema_version"
KIND = PREFIX + "kind"  # "turn" | "call" | "reward" | "end"
TRAJECTORY_ID = PREFIX + "trajectory.id"
ENCODING = PREFIX + "encoding"  # "packed" | "array"
TURN_INDEX = PREFIX + "turn.index"
PREFIX_LENGTH = PREFIX + "prefix.length"
PREFIX_CRC32 = PREFIX + "prefix.crc32"
PROMPT_IDS = PREFIX + "prompt.token_ids"
PROMPT_LOGPROBS = PREFIX + "prompt.logprobs"
OUTPUT_IDS = PREFIX + "output.token_ids"
OUTPUT_LOGPROBS = PREFIX + "output.logprobs"
FINISH_REASON = PREFIX + "finish_reason"
CACHED_TOKENS = PREFIX + "cached_tokens"  # absent: the server did not report it
LATENCY_S = PREFIX + "latency_s"  # absent: not measured
REQUEST_ID = PREFIX + "request_id"
WEIGHT_VERSION = PREFIX + "weight_version"
# Which weights sampled which output tokens: JSON ``[{"version", "start", "end"}]`` as bytes (absent: not said).
WEIGHT_VERSIONS = PREFIX + "weight_versions"
MODEL_ID = PREFIX + "model_id"
TOOL_PARSE_ERRORS = PREFIX + "tool_parse_errors"
ROUTED_EXPERTS = PREFIX + "routed_experts"
IMAGES = PREFIX + "images"  # bytes: manifest + image bytes (span_images.py)
REWARD_VALUE = PREFIX + "reward.value"
REWARD_NAME = PREFIX + "reward.name"
END_REASON = PREFIX + "end.reason"
END_TURNS = PREFIX + "end.turns"
END_LENGTH = PREFIX + "end.length"
END_CRC32 = PREFIX + "end.crc32"
# Calls: one OpenAI-compatible chat completion of a stock provider, recorded whole (see ``call_attributes``).
CALL_INDEX = PREFIX + "call.index"
END_UNIT = PREFIX + "end.unit"  # "turns" (default when absent) | "calls"
# Spans of the trajectory the agent's capture dropped past its spool's hard limit (absent: none), and their turn or
# call indices; the assembler marks such a trajectory incomplete with exactly that reason.
END_DROPPED = PREFIX + "end.dropped_spans"
END_DROPPED_INDICES = PREFIX + "end.dropped_indices"

# Most attributes one of our spans carries (lineage and GenAI ids included); start-up checks that the SDK's count
# limit leaves room for them plus Strands' own (about 20 on a chat span).
MAX_OWN_ATTRIBUTES = 36
STRANDS_ATTRIBUTE_BUDGET = 40

# Bounds a reader enforces so that anything it accepts can be assembled and written (a 1 MiB trajectory id would
# be stored, logged and exported whole). Capture's own ids and names are far below them.
MAX_TRAJECTORY_ID = 512
MAX_NAME = 1024
MAX_INDEX = checks.MAX_INT32
FINISH_REASONS = checks.FINISH_REASONS
END_UNITS = ("turns", "calls")

SPAN_TURN = "chat"
SPAN_REWARD = "tito.reward"
SPAN_END = "tito.trajectory.end"

Encoding = Literal["packed", "array"]


class SpanSchemaError(StrandsTitoError, ValueError):
    """A span claims to carry strands-tito data but the data is missing, mistyped or inconsistent."""


def _pack_floats(values: Sequence[float | None]) -> bytes:
    # One numpy conversion (None becomes NaN), not a Python step per value.
    return np.array(values, dtype=np.float64).astype("<f4").tobytes()


def encode_ids(ids: Sequence[int] | bytes, encoding: Encoding) -> bytes | list[int]:
    """Token IDs as an attribute value (``bytes`` are taken as already packed little-endian int32)."""
    if isinstance(ids, bytes):
        return ids if encoding == "packed" else np.frombuffer(ids, dtype="<i4").tolist()
    return pack_int32(ids) if encoding == "packed" else list(ids)


def encode_logprobs(logprobs: Sequence[float | None] | bytes | None, encoding: Encoding) -> bytes | list[float] | None:
    """Logprobs as an attribute value; a missing logprob is NaN (OTLP arrays cannot hold nulls); None (a turn
    without logprobs) stays None: the span then carries no logprob attribute at all.

    ``bytes`` are taken as already packed little-endian float32.
    """
    if logprobs is None:
        return None
    if isinstance(logprobs, bytes):
        return logprobs if encoding == "packed" else np.frombuffer(logprobs, dtype="<f4").astype(float).tolist()
    if encoding == "packed":
        return _pack_floats(logprobs)
    floats: list[float] = np.array(logprobs, dtype=np.float64).tolist()  # None becomes NaN
    return floats


def _token_ids(attributes: Mapping[str, Any], key: str) -> Any:
    """Token IDs as a validated int32 numpy array (no Python objects made for packed bytes)."""
    return checks.token_id_array(_get(attributes, key, (bytes, list, tuple)), key, SpanSchemaError)


def _logprobs_of(attributes: Mapping[str, Any], key: str, ids: Any, missing: checks.Missing) -> Any:
    """A span's logprobs as a validated float array as long as ``ids`` (NaN where missing), or None where the span
    carries none: its turn recorded no logprobs (spans written before they could be absent: output all NaN)."""
    if key not in attributes:
        return None
    values = checks.logprob_array(_get(attributes, key, (bytes, list, tuple)), key, SpanSchemaError, missing=missing)
    if len(values) != len(ids):
        raise SpanSchemaError("logprob arrays and token arrays differ in length")
    return None if missing == "all_or_none" and np.isnan(values).all() else values


def _logprobs_list(values: Any) -> list[float | None] | None:
    if values is None:
        return None
    floats: list[float | None] = values.astype(np.float64).tolist()
    missing = np.flatnonzero(np.isnan(values))
    if len(missing) == len(floats):
        return [None] * len(floats)
    for i in missing.tolist():  # NaN (a missing logprob) back to None
        floats[i] = None
    return floats


@dataclass(frozen=True)
class TurnSpan:
    """One turn as carried by a ``chat`` span."""

    trajectory_id: str
    index: int
    prefix_length: int
    prefix_crc32: int
    prompt_ids: list[int]
    prompt_logprobs: list[float | None] | None  # both None: the turn recorded no logprobs
    output_ids: list[int]
    output_logprobs: list[float | None] | None
    finish_reason: str
    cached_tokens: int | None = None
    latency_s: float | None = None
    request_id: str | None = None
    weight_version: str | None = None
    model_id: str | None = None
    tool_parse_errors: list[dict[str, str]] = field(default_factory=list)
    routed_experts: bytes | None = None
    images: list[SpanImage] = field(default_factory=list)
    """The images this turn's prompt tokens added, in prompt order (``tito.images``)."""
    image_token_id: int | None = None
    routed_experts_layout: tuple[int, int, int] | None = None
    top_p: tuple[list[int], list[int]] | None = None  # (token_ids, offsets) of the output positions
    lineage: Lineage = field(default_factory=lambda: Lineage())
    weight_versions: tuple[checks.WeightVersionSpan, ...] = ()


@dataclass(frozen=True)
class CallSpan:
    """One OpenAI-compatible chat completion as carried by a ``chat`` span (kind ``call``).

    Unlike a turn, a call carries its *whole* prompt as the server rendered and tokenized it: consecutive calls of a
    text agent need not share a prefix (the server re-renders the history), so no prefix length or checksum links
    them; the assembler measures whether they do. An assembled call record keeps these spans as its ``calls``.
    """

    trajectory_id: str
    index: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float | None] | None  # None: the call has no logprobs (not asked for, or not all real)
    finish_reason: str
    model_id: str | None = None
    request_id: str | None = None
    lineage: Lineage = field(default_factory=lambda: Lineage())

    def to_dict(self) -> CallEntry:
        """The call as an entry of a record's ``calls`` (:class:`~strands_tito.records.CallEntry`; plain JSON)."""
        return {
            "index": self.index,
            "prompt_ids": list(self.prompt_ids),
            "output_ids": list(self.output_ids),
            "output_logprobs": None if self.output_logprobs is None else list(self.output_logprobs),
            "finish_reason": self.finish_reason,
            "request_id": self.request_id,
        }


@dataclass(frozen=True)
class RewardSpan:
    """A reward recorded for a trajectory."""

    trajectory_id: str
    value: float
    name: str
    time_unix_nano: int


@dataclass(frozen=True)
class EndSpan:
    """The agent side's signal that a trajectory is over, with what it should contain."""

    trajectory_id: str
    reason: str
    turns: int
    length: int
    crc32: int
    unit: str = "turns"
    """``turns``, or ``calls`` for a call trajectory: then ``turns`` counts calls, ``length`` is the sum of every
    call's prompt and output lengths and ``crc32`` the running CRC-32 over each call's prompt then output ids."""
    dropped: int = 0
    """Spans of this trajectory the agent's capture dropped (spool past its hard limit): the record is incomplete."""
    dropped_indices: tuple[int, ...] = ()
    """The turn (or call) indices of those spans."""


@dataclass(frozen=True)
class SpanRef:
    """A turn or call span that was fully validated but not unpacked into Python lists.

    The collector keeps only these in memory (the payload waits in its store) and unpacks a trajectory's spans when
    it is finished; ``digest`` tells an identical retry from a conflicting span.
    """

    kind: str
    trajectory_id: str
    index: int
    digest: int


Decoded = TurnSpan | RewardSpan | EndSpan | CallSpan | SpanRef


def turn_attributes(  # noqa: PLR0913, PLR0917  one parameter per attribute of the turn span's schema
    trajectory_id: str,
    index: int,
    prefix_length: int,
    prefix_crc32: int,
    prompt_ids: Sequence[int] | bytes,
    prompt_logprobs: Sequence[float | None] | bytes | None,
    output_ids: Sequence[int] | bytes,
    output_logprobs: Sequence[float | None] | bytes | None,
    *,
    finish_reason: str,
    encoding: Encoding = "packed",
    cached_tokens: int | None = None,
    latency_s: float | None = None,
    request_id: str | None = None,
    weight_version: str | None = None,
    model_id: str | None = None,
    tool_parse_errors: Sequence[Mapping[str, str]] = (),
    routed_experts: bytes | None = None,
    routed_experts_layout: tuple[int, int, int] | None = None,
    top_p: tuple[Sequence[int], Sequence[int]] | None = None,
    images: bytes | None = None,
    weight_versions: Sequence[checks.WeightVersionSpan] = (),
) -> dict[str, Any]:
    """The attributes that put one turn on its ``chat`` span (``images``: from ``span_images.encode_images``;
    ``routed_experts``: int32 rows, compact when their ``routed_experts_layout`` is known; ``output_logprobs``
    None: a turn without logprobs, whose span carries no logprob attributes)."""
    attributes: dict[str, Any] = {
        SCHEMA: SCHEMA_VERSION,
        KIND: "turn",
        TRAJECTORY_ID: trajectory_id,
        ENCODING: encoding,
        TURN_INDEX: index,
        PREFIX_LENGTH: prefix_length,
        # OTLP ints are signed 64-bit; a CRC-32 always fits.
        PREFIX_CRC32: prefix_crc32,
        PROMPT_IDS: encode_ids(prompt_ids, encoding),
        PROMPT_LOGPROBS: encode_logprobs(prompt_logprobs, encoding),
        OUTPUT_IDS: encode_ids(output_ids, encoding),
        OUTPUT_LOGPROBS: encode_logprobs(output_logprobs, encoding),
        FINISH_REASON: finish_reason,
    }
    if output_logprobs is None:
        del attributes[PROMPT_LOGPROBS], attributes[OUTPUT_LOGPROBS]
    optional = {
        CACHED_TOKENS: cached_tokens,
        LATENCY_S: latency_s,
        REQUEST_ID: request_id,
        WEIGHT_VERSION: weight_version,
        MODEL_ID: model_id,
    }
    attributes.update((key, value) for key, value in optional.items() if value is not None)
    if weight_versions:
        # Bytes, like the tool parse errors: the SDK's length limits only ever cut strings.
        attributes[WEIGHT_VERSIONS] = json.dumps(checks.weight_version_spans_json(weight_versions)).encode()
    if tool_parse_errors:
        # Bytes, not a string: the SDK's length limits only ever cut strings.
        attributes[TOOL_PARSE_ERRORS] = json.dumps(list(tool_parse_errors)).encode()
    if routed_experts is not None and routed_experts_layout is None:
        attributes[ROUTED_EXPERTS] = routed_experts
    attributes.update(replay_attributes(routed_experts, routed_experts_layout, top_p, packed=encoding == "packed"))
    if images is not None:
        attributes[IMAGES] = images
    return attributes


def call_attributes(
    trajectory_id: str,
    index: int,
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    output_logprobs: Sequence[float | None] | None,
    *,
    finish_reason: str,
    encoding: Encoding = "packed",
    model_id: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The attributes that put one OpenAI-compatible call on its ``chat`` span.

    ``prompt_ids`` is the whole prompt the server tokenized for this call; ``finish_reason`` is the server's string
    (``stop``, ``length``, ``tool_calls``, ...); ``output_logprobs`` None (not asked for): no logprob attribute.
    """
    attributes: dict[str, Any] = {
        SCHEMA: SCHEMA_VERSION,
        KIND: "call",
        TRAJECTORY_ID: trajectory_id,
        ENCODING: encoding,
        CALL_INDEX: index,
        PROMPT_IDS: encode_ids(prompt_ids, encoding),
        OUTPUT_IDS: encode_ids(output_ids, encoding),
        OUTPUT_LOGPROBS: encode_logprobs(output_logprobs, encoding),
        FINISH_REASON: finish_reason,
    }
    if output_logprobs is None:
        del attributes[OUTPUT_LOGPROBS]
    if model_id is not None:
        attributes[MODEL_ID] = model_id
    if request_id is not None:
        attributes[REQUEST_ID] = request_id
    return attributes


def _digest(attributes: Mapping[str, Any]) -> int:
    """CRC-32 over a span's strands-tito attributes, to tell an identical retry from a conflicting span."""
    crc = 0
    for key in sorted(k for k in attributes if k.startswith(PREFIX)):
        value = attributes[key]
        crc = zlib.crc32(key.encode(), crc)
        crc = zlib.crc32(value if isinstance(value, bytes) else repr(value).encode(), crc)
    return crc


def _decode_call(attributes: Mapping[str, Any], trajectory_id: str, unpack: bool) -> CallSpan | SpanRef:
    prompt_ids = _token_ids(attributes, PROMPT_IDS)
    output_ids = _token_ids(attributes, OUTPUT_IDS)
    output_logprobs = _logprobs_of(attributes, OUTPUT_LOGPROBS, output_ids, "all_or_none")
    if not len(prompt_ids) or not len(output_ids):
        raise SpanSchemaError("a call needs a non-empty prompt and output")
    index = _get_int(attributes, CALL_INDEX, 0, MAX_INDEX)
    finish_reason = _get_str(attributes, FINISH_REASON)
    model_id = _opt_str_attr(attributes, MODEL_ID)
    request_id = _opt_str_attr(attributes, REQUEST_ID)
    lineage = decode_lineage(attributes)
    if not unpack:
        return SpanRef("call", trajectory_id, index, _digest(attributes))
    return CallSpan(
        trajectory_id=trajectory_id,
        index=index,
        prompt_ids=prompt_ids.tolist(),
        output_ids=output_ids.tolist(),
        output_logprobs=_logprobs_list(output_logprobs),
        finish_reason=finish_reason,
        model_id=model_id,
        request_id=request_id,
        lineage=lineage,
    )


def _get_int(attributes: Mapping[str, Any], key: str, low: int, high: int) -> int:
    """A required int attribute within ``[low, high]``."""
    value: int = _get(attributes, key, int)
    if not low <= value <= high:
        raise SpanSchemaError(f"attribute {key} is {value}, outside [{low}, {high}]")
    return value


def _get_str(attributes: Mapping[str, Any], key: str, limit: int = MAX_NAME) -> str:
    """A required string attribute of at most ``limit`` characters."""
    value: str = _get(attributes, key, str)
    if len(value) > limit:
        raise SpanSchemaError(f"attribute {key} is longer than {limit} characters")
    return value


def _opt_duration(attributes: Mapping[str, Any], key: str) -> float | None:
    """An optional duration in seconds: absent gives None, present must be a finite number, not negative."""
    if key not in attributes:
        return None
    value = float(_get(attributes, key, (int, float)))
    if not (math.isfinite(value) and value >= 0):
        raise SpanSchemaError(f"attribute {key} must be a finite number of seconds, not negative")
    return value


def _opt_str_attr(attributes: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    """An optional string attribute: absent gives ``default``, present must be a bounded string."""
    return _get_str(attributes, key) if key in attributes else default


def _tool_parse_errors(raw: Any) -> list[dict[str, str]]:
    """``tito.tool_parse_errors``: UTF-8 JSON (bytes, or a string) of a list of string-to-string objects."""
    if raw is None:
        return []
    if not isinstance(raw, bytes | str):
        raise SpanSchemaError(f"{TOOL_PARSE_ERRORS} must be bytes, got {type(raw).__name__}")
    try:
        errors = json.loads(raw)
    except (ValueError, TypeError, RecursionError) as e:
        raise SpanSchemaError(f"{TOOL_PARSE_ERRORS} is not JSON") from e
    if not isinstance(errors, list) or not all(
        isinstance(e, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in e.items()) for e in errors
    ):
        raise SpanSchemaError(f"{TOOL_PARSE_ERRORS} is not a list of string-to-string objects")
    return errors


def _routed_experts(raw: Any, prefix_length: int, new_tokens: int) -> bytes | None:
    """``tito.routed_experts``: whole int32 rows for every position the turn routes (as Trajectory checks it)."""
    if raw is None:
        return None
    if not isinstance(raw, bytes):
        raise SpanSchemaError(f"{ROUTED_EXPERTS} must be bytes")
    checks.routed_expert_rows(raw, prefix_length, new_tokens, ROUTED_EXPERTS, SpanSchemaError)
    return raw


def _get(attributes: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in attributes:
        raise SpanSchemaError(f"missing attribute {key}")
    value = attributes[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpanSchemaError(f"attribute {key} has type {type(value).__name__}")
    return value


def is_tito_span(attributes: Mapping[str, Any]) -> bool:
    """Whether a span claims to carry strands-tito data."""
    return SCHEMA in attributes or TRAJECTORY_ID in attributes


def decode_span(attributes: Mapping[str, Any], end_time_unix_nano: int = 0, *, unpack: bool = True) -> Decoded:
    """Decode and validate a strands-tito span's attributes (plain Python values, as the SDK or OTLP give them).

    With ``unpack=False`` a turn or call is validated just as thoroughly but comes back as a :class:`SpanRef`
    (no token lists are built; packed arrays are checked with numpy), for a reader that keeps the payload elsewhere.

    Raises:
        SpanSchemaError: unknown schema version, missing or mistyped attributes, wrong packed lengths.
    """
    version = _get(attributes, SCHEMA, int)
    if version != SCHEMA_VERSION:
        raise SpanSchemaError(f"unknown {SCHEMA} {version} (this reader knows {SCHEMA_VERSION})")
    trajectory_id = _get_str(attributes, TRAJECTORY_ID, MAX_TRAJECTORY_ID)
    if not trajectory_id:
        raise SpanSchemaError(f"empty {TRAJECTORY_ID}")
    kind = _get(attributes, KIND, str)
    if kind == "reward":
        value = float(_get(attributes, REWARD_VALUE, (int, float)))
        if not math.isfinite(value):
            raise SpanSchemaError("reward is not a finite number")
        name = _opt_str_attr(attributes, REWARD_NAME, "reward")
        return RewardSpan(trajectory_id, value, name or "reward", end_time_unix_nano)
    if kind == "end":
        return _decode_end(attributes, trajectory_id)
    if kind not in ("turn", "call"):
        raise SpanSchemaError(f"unknown {KIND} {kind[:64]!r}")
    try:
        return (_decode_turn if kind == "turn" else _decode_call)(attributes, trajectory_id, unpack)
    except (ReplayDataError, LineageSchemaError) as e:  # their own modules' errors, as this schema's
        raise SpanSchemaError(str(e)) from None


def _decode_turn(attributes: Mapping[str, Any], trajectory_id: str, unpack: bool) -> TurnSpan | SpanRef:
    prompt_ids = _token_ids(attributes, PROMPT_IDS)
    output_ids = _token_ids(attributes, OUTPUT_IDS)
    if (PROMPT_LOGPROBS in attributes) != (OUTPUT_LOGPROBS in attributes):
        raise SpanSchemaError(f"a turn carries both {PROMPT_LOGPROBS} and {OUTPUT_LOGPROBS} or neither")
    prompt_logprobs = _logprobs_of(attributes, PROMPT_LOGPROBS, prompt_ids, "anywhere")
    output_logprobs = _logprobs_of(attributes, OUTPUT_LOGPROBS, output_ids, "all_or_none")
    prompt_logprobs = None if output_logprobs is None else prompt_logprobs
    errors = _tool_parse_errors(attributes.get(TOOL_PARSE_ERRORS))
    index = _get_int(attributes, TURN_INDEX, 0, MAX_INDEX)
    prefix_length = _get_int(attributes, PREFIX_LENGTH, 0, MAX_INDEX)
    prefix_crc32 = _get_int(attributes, PREFIX_CRC32, 0, 2**32 - 1)
    if not len(output_ids) or (prefix_length == 0 and not len(prompt_ids)):
        raise SpanSchemaError("a turn needs output tokens, and the first turn a prompt")
    routed, layout = _routing(attributes, prefix_length, len(prompt_ids) + len(output_ids))
    top_p, lineage = decode_top_p(attributes, len(output_ids)), decode_lineage(attributes)
    images: list[SpanImage] = []
    image_token_id = None
    if IMAGES in attributes:
        try:
            images, image_token_id = decode_images(attributes[IMAGES])
        except ImageSchemaError as e:
            raise SpanSchemaError(str(e)) from None
        if image_token_id is not None and int((prompt_ids == image_token_id).sum()) != len(images):
            raise SpanSchemaError(f"{IMAGES}: the prompt tokens hold a placeholder count other than {len(images)}")
    finish_reason = checks.finish_reason(_get_str(attributes, FINISH_REASON), FINISH_REASON, SpanSchemaError)
    cached_tokens = _get_int(attributes, CACHED_TOKENS, 0, MAX_INDEX) if CACHED_TOKENS in attributes else None
    latency_s = _opt_duration(attributes, LATENCY_S)
    request_id = _opt_str_attr(attributes, REQUEST_ID)
    weight_version = _opt_str_attr(attributes, WEIGHT_VERSION)
    weight_versions = _weight_versions(attributes.get(WEIGHT_VERSIONS), len(output_ids), weight_version)
    model_id = _opt_str_attr(attributes, MODEL_ID)
    if not unpack:
        return SpanRef("turn", trajectory_id, index, _digest(attributes))
    return TurnSpan(
        trajectory_id=trajectory_id,
        index=index,
        prefix_length=prefix_length,
        prefix_crc32=prefix_crc32,
        prompt_ids=prompt_ids.tolist(),
        prompt_logprobs=_logprobs_list(prompt_logprobs),
        output_ids=output_ids.tolist(),
        output_logprobs=_logprobs_list(output_logprobs),
        finish_reason=finish_reason,
        cached_tokens=cached_tokens,
        latency_s=latency_s,
        request_id=request_id,
        weight_version=weight_version,
        model_id=model_id,
        tool_parse_errors=errors,
        routed_experts=routed,
        images=images,
        image_token_id=image_token_id,
        weight_versions=weight_versions,
        routed_experts_layout=layout,
        top_p=top_p,
        lineage=lineage,
    )


def _weight_versions(raw: Any, output_length: int, weight_version: str | None) -> tuple[checks.WeightVersionSpan, ...]:
    """``tito.weight_versions``: runs covering the turn's output, the last one ``tito.weight_version``'s."""
    if raw is None:
        return ()
    if not isinstance(raw, bytes | str):
        raise SpanSchemaError(f"{WEIGHT_VERSIONS} must be bytes, got {type(raw).__name__}")
    runs = checks.parse_json_spans(raw, output_length, WEIGHT_VERSIONS, SpanSchemaError)
    if any(len(run.version) > MAX_NAME for run in runs):
        raise SpanSchemaError(f"{WEIGHT_VERSIONS}: a version is longer than {MAX_NAME} characters")
    if runs and runs[-1].version != weight_version:
        raise SpanSchemaError(f"{WEIGHT_VERSIONS} ends with {runs[-1].version!r:.80}, {WEIGHT_VERSION} is another")
    return runs


def _routing(
    attributes: Mapping[str, Any], prefix_length: int, new_tokens: int
) -> tuple[bytes | None, tuple[int, int, int] | None]:
    """A turn's routing as int32 rows, from ``tito.routed_experts`` or its compact form, and its layout if known."""
    routed = _routed_experts(attributes.get(ROUTED_EXPERTS), prefix_length, new_tokens)
    compact = decode_compact_routing(attributes, new_tokens if prefix_length else new_tokens - 1)
    if compact is not None and routed is not None:
        raise SpanSchemaError(f"{ROUTED_EXPERTS} and its compact form both present")
    return compact or (routed, None)


def _dropped_count(attributes: Mapping[str, Any]) -> int:
    return _get_int(attributes, END_DROPPED, 0, MAX_INDEX) if END_DROPPED in attributes else 0


def _dropped_indices(attributes: Mapping[str, Any]) -> list[int]:
    value = attributes.get(END_DROPPED_INDICES, [])
    if not isinstance(value, list | tuple) or not all(type(v) is int and 0 <= v <= MAX_INDEX for v in value):
        raise SpanSchemaError(f"{END_DROPPED_INDICES} must be an array of turn indices")
    return sorted(value)


def _decode_end(attributes: Mapping[str, Any], trajectory_id: str) -> EndSpan:
    """An end signal; it must announce at least one turn (an end alone is never a trajectory)."""
    unit = _opt_str_attr(attributes, END_UNIT, "turns") or "turns"
    if unit not in END_UNITS:
        raise SpanSchemaError(f"unknown {END_UNIT} {unit[:64]!r}")
    return EndSpan(
        trajectory_id,
        _opt_str_attr(attributes, END_REASON, "") or "",
        _get_int(attributes, END_TURNS, 1, MAX_INDEX),
        _get_int(attributes, END_LENGTH, 1, 2**62),
        _get_int(attributes, END_CRC32, 0, 2**32 - 1),
        unit,
        _dropped_count(attributes),
        tuple(_dropped_indices(attributes)),
    )


__all__ = [
    "SCHEMA_VERSION",
    "CallSpan",
    "EndSpan",
    "RewardSpan",
    "SpanRef",
    "SpanSchemaError",
    "TurnSpan",
    "call_attributes",
    "decode_span",
    "is_tito_span",
    "turn_attributes",
]
