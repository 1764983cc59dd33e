"""A trajectory as plain data: the fields :meth:`Trajectory.model_dump` writes and :meth:`Trajectory.model_validate`
reads back (also strands-sglang 0.6's ``Rollout`` dumps), and the pydantic schema that makes a
:class:`~strands_tito.trajectory.Trajectory` a field type.

Reading fields back replays them turn by turn through :meth:`Trajectory.append_turn` and
:meth:`Trajectory.add_prompt`, so a loaded trajectory passes exactly the checks a live one does; what the turns
derive (loss mask, segments, checksums, packed arrays) is recomputed and must match what the fields say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, NotRequired, TypedDict

from pydantic import TypeAdapter, ValidationError
from pydantic_core import core_schema

from strands_tito import checks
from strands_tito.records import WeightVersionRun
from strands_tito.trajectory import FinishReason, Trajectory, TrajectoryError

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

__all__ = ["TrajectoryFields", "TurnFields", "fields_of", "pydantic_schema", "trajectory_from_fields"]


class TurnFields(TypedDict):
    """One turn in :class:`TrajectoryFields`: what the token arrays do not already say about it."""

    prompt_length: int
    output_length: int
    finish_reason: FinishReason
    matched_stop: int | str | None
    cached_tokens: int | None
    latency_s: float | None
    request_id: str | None
    weight_version: str | None
    weight_versions: NotRequired[list[WeightVersionRun]]
    """Which weights sampled which output tokens: ``{version, start, end}`` runs (absent in older dumps)."""
    has_routed_experts: bool
    """Whether the next slice of ``routed_experts`` is this turn's."""
    images: int
    """How many of the next ``image_data`` this turn's new prompt holds."""


class TrajectoryFields(TypedDict, total=False):
    """A trajectory as plain data (:meth:`Trajectory.model_dump`): strands-sglang 0.6's ``Rollout`` fields, plus
    ``trajectory_id`` and ``turns``.

    Every key is optional when it is read back; ``loss_mask`` and ``segment_info`` are checked against what the
    turns give. A dump without ``turns`` (strands-sglang 0.6's) is replayed segment by segment, each output segment a
    turn (the routed-expert slices one per turn, the images all in the first).
    """

    trajectory_id: str
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float | None] | None
    segment_info: list[tuple[bool, int]]
    routed_experts: list[str]
    image_data: list[str]
    turns: list[TurnFields]


def pydantic_schema(cls: type[Trajectory], handler: GetCoreSchemaHandler) -> CoreSchema:
    """The pydantic core schema of ``cls``: :meth:`Trajectory.model_validate` in, :func:`fields_of` out."""
    return core_schema.no_info_plain_validator_function(
        cls.model_validate,
        json_schema_input_schema=handler.generate_schema(TrajectoryFields),
        serialization=core_schema.plain_serializer_function_ser_schema(_serialize, info_arg=True),
    )


def _serialize(trajectory: Trajectory, info: core_schema.SerializationInfo) -> TrajectoryFields:
    return fields_of(trajectory, json=info.mode == "json")


def fields_of(trajectory: Trajectory, *, json: bool = False) -> TrajectoryFields:
    """``trajectory`` as :class:`TrajectoryFields` (fresh lists); ``json``: ``segment_info`` pairs as lists."""
    return {
        "trajectory_id": trajectory.trajectory_id,
        "token_ids": list(trajectory.token_ids),
        "loss_mask": list(trajectory.loss_mask),
        "logprobs": None if trajectory.logprobs is None else list(trajectory.logprobs),
        "segment_info": [[*pair] for pair in trajectory.segment_info] if json else trajectory.segment_info,  # type: ignore[misc]
        "routed_experts": trajectory.routed_experts,
        "image_data": list(trajectory.images),
        "turns": [
            {
                "prompt_length": t.prompt_length,
                "output_length": t.output_length,
                "finish_reason": t.finish_reason,
                "matched_stop": t.matched_stop,
                "cached_tokens": t.cached_tokens,
                "latency_s": t.latency_s,
                "request_id": t.request_id,
                "weight_version": t.weight_version,
                "weight_versions": checks.weight_version_spans_json(t.weight_versions),
                "has_routed_experts": t.routed_experts is not None,
                "images": len(t.image_data),
            }
            for t in trajectory.turns
        ],
    }


def trajectory_from_fields(trajectory: Trajectory, fields: object) -> Trajectory:
    """``trajectory`` (empty) rebuilt from ``fields`` through its checked methods.

    Raises:
        TrajectoryError: ``fields`` is not a mapping of :class:`TrajectoryFields` that makes a valid trajectory.
    """
    if not isinstance(fields, Mapping):
        raise TrajectoryError(f"expected a Trajectory or a dict of its fields, got {type(fields).__name__}")
    unknown = set(fields) - TrajectoryFields.__annotations__.keys()
    if unknown:
        raise TrajectoryError(f"unknown trajectory fields {sorted(unknown)}")
    try:
        return _replay(trajectory, fields)
    except (TypeError, KeyError, AttributeError) as e:  # a field of the wrong shape
        raise TrajectoryError(f"malformed trajectory fields: {type(e).__name__}: {e}") from None


def _replay(trajectory: Trajectory, fields: Mapping[str, Any]) -> Trajectory:
    if "trajectory_id" in fields:
        if not isinstance(fields["trajectory_id"], str):
            raise TrajectoryError("trajectory_id must be a string")
        trajectory.trajectory_id = fields["trajectory_id"]
    ids = list(fields.get("token_ids", ()))
    # None (or absent): recorded without logprobs; a list: per token (an older dump's turn without them is all None)
    given = fields.get("logprobs")
    logprobs = _Logprobs(None if given is None else list(given))
    if logprobs.values is not None and len(logprobs.values) != len(ids):
        raise TrajectoryError(f"{len(logprobs.values)} logprobs for {len(ids)} token ids")
    routed = list(fields.get("routed_experts", ()))
    images = list(fields.get("image_data", ()))
    if "turns" in fields:
        try:  # the turns' own fields have their types (the arrays are checked turn by turn below)
            turns = _turn_list().validate_python(fields["turns"])
        except ValidationError as e:
            raise TrajectoryError(f"malformed turns: {e}") from None
        end = _replay_turns(trajectory, ids, logprobs, turns, routed, images)
    else:
        end = _replay_segments(trajectory, ids, logprobs, fields, routed, images)
    trajectory.add_prompt(ids[end:], logprobs.prompt(end, len(ids)))  # prompt tokens added after the last turn
    if "loss_mask" in fields and list(fields["loss_mask"]) != trajectory.loss_mask:
        raise TrajectoryError("loss_mask is not 1 exactly on the turns' output tokens")
    if "segment_info" in fields and _runs(fields["segment_info"]) != trajectory.segment_info:
        raise TrajectoryError("segment_info does not match the turns")
    return trajectory


class _Logprobs(NamedTuple):
    """A dump's logprobs (None: not recorded), sliced for :meth:`Trajectory.append_turn`."""

    values: list[float | None] | None

    def prompt(self, start: int, end: int) -> list[float | None] | None:
        return None if self.values is None else self.values[start:end]

    def output(self, start: int, end: int) -> list[float | None] | None:
        """None for a turn without logprobs (all None in dumps written before a trajectory could lack them)."""
        values = self.prompt(start, end)
        return None if values is None or values.count(None) == len(values) else values


@cache
def _turn_list() -> TypeAdapter[list[TurnFields]]:
    return TypeAdapter(list[TurnFields])


def _replay_turns(  # noqa: PLR0917  the loader's state threaded through, in the record's order
    trajectory: Trajectory,
    ids: list[int],
    logprobs: _Logprobs,
    turns: Sequence[Mapping[str, Any]],
    routed: list[str],
    images: list[str],
) -> int:
    """Append our own dump's turns; the end of the last one."""
    position = 0
    routed_used = images_used = 0
    for turn in turns:
        middle = position + turn["prompt_length"]
        end = middle + turn["output_length"]
        if not 0 <= position <= middle <= end <= len(ids):
            raise TrajectoryError(f"turn {len(trajectory.turns)} does not fit in {len(ids)} token ids")
        slice_ = None
        if turn["has_routed_experts"]:
            if routed_used == len(routed):
                raise TrajectoryError("more turns have routed experts than routed_experts holds")
            slice_, routed_used = routed[routed_used], routed_used + 1
        count = turn["images"]
        if not isinstance(count, int) or not 0 <= count <= len(images) - images_used:
            raise TrajectoryError(f"turn {len(trajectory.turns)} has more images than image_data holds")
        trajectory.append_turn(
            ids[position:middle],
            ids[middle:end],
            finish_reason=turn["finish_reason"],
            prompt_logprobs=logprobs.prompt(position, middle),
            output_logprobs=logprobs.output(middle, end),
            matched_stop=turn["matched_stop"],
            cached_tokens=turn["cached_tokens"],
            latency_s=turn["latency_s"],
            request_id=turn["request_id"],
            weight_version=turn["weight_version"],
            weight_versions=turn.get("weight_versions", ()),
            routed_experts=slice_,
            image_data=images[images_used : images_used + count],
        )
        images_used += count
        position = end
    if routed_used != len(routed) or images_used != len(images):
        raise TrajectoryError("routed_experts or image_data hold more than the turns account for")
    return position


def _replay_segments(  # noqa: PLR0917  the loader's state threaded through, in the record's order
    trajectory: Trajectory,
    ids: list[int],
    logprobs: _Logprobs,
    fields: Mapping[str, Any],
    routed: list[str],
    images: list[str],
) -> int:
    """Append strands-sglang 0.6's segments, each output segment one turn; the end of the last output."""
    if "segment_info" in fields:
        segments = [(bool(is_output), int(length)) for is_output, length in fields["segment_info"]]
    else:  # the runs of the loss mask, or one prompt
        segments = _runs([(bool(m), 1) for m in fields.get("loss_mask", [0] * len(ids))])
    if sum(length for _, length in segments) != len(ids) or any(length <= 0 for _, length in segments):
        raise TrajectoryError(f"segment_info does not tile the {len(ids)} token ids")
    outputs = sum(is_output for is_output, _ in segments)
    if routed and len(routed) != outputs:
        raise TrajectoryError(f"{len(routed)} routed-experts slices for {outputs} turns")
    if images and not outputs:
        raise TrajectoryError("image_data needs a turn to belong to")
    position = end = 0
    for is_output, length in segments:
        if not is_output:
            trajectory.add_prompt(ids[position : position + length], logprobs.prompt(position, position + length))
        else:
            if not trajectory.segments:
                raise TrajectoryError("the first segment must be a prompt")
            first = not trajectory.turns
            trajectory.append_turn(
                (),
                ids[position : position + length],
                finish_reason="stop",
                output_logprobs=logprobs.output(position, position + length),
                routed_experts=routed[len(trajectory.turns)] if routed else None,
                image_data=images if first else (),
            )
            end = position + length
        position += length
    return end


def _runs(segments: Iterable[Sequence[Any]]) -> list[tuple[bool, int]]:
    """``(is_output, length)`` pairs with neighbours of one kind joined (a trajectory keeps one segment per run)."""
    runs: list[tuple[bool, int]] = []
    for is_output, length in segments:
        if runs and runs[-1][0] == bool(is_output):
            runs[-1] = (runs[-1][0], runs[-1][1] + int(length))
        else:
            runs.append((bool(is_output), int(length)))
    return runs
