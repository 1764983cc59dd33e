"""A trajectory is a pydantic field type with BaseModel's methods, and its plain-data round trip loses nothing.

Hand-built trajectories (strands-sglang 0.6's ``add_prompt`` / ``add_response`` / ``add_routed_experts``) and loaded
ones go through the same checks as the model's own turns.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from strands_tito.trajectory import Trajectory, TrajectoryError

DATA = Path(__file__).resolve().parents[1] / "data"
#: A Rollout dumped by the real strands-sglang 0.6.2 (``model_dump_json()``): two turns, routed experts, an image.
ROLLOUT_062 = DATA / "strands_sglang_0.6.2_rollout.json"


class RolloutResult(BaseModel):
    """strands-env 0.7.3's shape: a trajectory as an optional field of a pydantic model."""

    rollout: Trajectory | None = None
    reward: float = 0.0


def routing(rows: int, offset: int = 0) -> str:
    """A routed-experts slice of ``rows`` rows, one layer, top-1."""
    return base64.b64encode(np.arange(offset, offset + rows, dtype="<i4").tobytes()).decode()


def image(n: int) -> str:
    return "data:image/png;base64," + base64.b64encode(bytes([n, 1, 2])).decode()


def assert_same(loaded: Trajectory, original: Trajectory) -> None:
    """Equal in everything, derived state included (dataclass equality leaves out the packed arrays)."""
    assert loaded == original
    assert loaded.turns == original.turns  # per-turn routed experts, images, checksums, server fields
    assert (loaded.packed_ids, loaded.packed_logprobs, loaded.ids_json) == (
        original.packed_ids,
        original.packed_logprobs,
        original.ids_json,
    )
    assert loaded.crc32 == original.crc32 == zlib.crc32(bytes(original.packed_ids))


# -- trajectories built by the model's path and by hand, mixed --------------------------------------------------------

# What strands_tito.checks accepts: finite values that stay finite as float32; a generated token's logprob is never
# missing beside real ones (a prompt token's may be).
_output_logprob = st.one_of(st.floats(-3.4e38, 3.4e38, width=64), st.sampled_from([0.0, -0.0]))
_logprob = st.one_of(st.none(), _output_logprob)


@st.composite
def trajectories(draw: st.DrawFn) -> Trajectory:
    t = Trajectory()
    recorded = draw(st.booleans())  # every turn carries logprobs, or none does
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["turn", "hand", "prompt"]))
        ids = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12)
        prompt = draw(ids) if kind == "prompt" or not t.segments or draw(st.booleans()) else []
        output = draw(ids)
        images = [image(i) for i in range(draw(st.integers(0, 2)))] if prompt else []
        prompt_logprobs = draw(st.one_of(st.none(), st.lists(_logprob, min_size=len(prompt), max_size=len(prompt))))
        output_logprobs = draw(st.lists(_output_logprob, min_size=len(output), max_size=len(output)))
        if not recorded:
            prompt_logprobs = output_logprobs = None
        turn_start = t.turns[-1].output_start + t.turns[-1].output_length if t.turns else 0
        rows = len(t) - turn_start + len(prompt) + len(output) - (0 if turn_start else 1)
        experts = routing(rows, offset=len(t)) if draw(st.booleans()) else None
        if kind == "prompt":
            t.add_prompt(prompt, prompt_logprobs)
        elif kind == "hand":
            t.add_prompt(prompt, prompt_logprobs)
            t.add_response(output, output_logprobs)
            if experts is not None:
                t.add_routed_experts(experts)
        else:
            t.append_turn(
                prompt,
                output,
                finish_reason=draw(st.sampled_from(["stop", "length", "abort"])),
                prompt_logprobs=prompt_logprobs,
                output_logprobs=output_logprobs,
                matched_stop=draw(st.one_of(st.none(), st.integers(0, 200_000), st.text(max_size=4))),
                cached_tokens=draw(st.integers(0, 100)),
                latency_s=draw(st.one_of(st.none(), st.floats(0, 100))),
                request_id=draw(st.one_of(st.none(), st.text(max_size=8))),
                weight_version=draw(st.one_of(st.none(), st.text(max_size=4))),
                routed_experts=experts,
                image_data=images,
            )
    return t


@settings(max_examples=200, deadline=None)
@given(trajectories())
def test_every_dump_reads_back_the_same_trajectory(t: Trajectory) -> None:
    assert_same(Trajectory.model_validate(t.model_dump()), t)
    assert_same(Trajectory.model_validate(t.model_dump(mode="json")), t)
    assert_same(Trajectory.model_validate_json(t.model_dump_json()), t)
    assert json.loads(t.model_dump_json()) == t.model_dump(mode="json")  # the same plain data


@settings(max_examples=100, deadline=None)
@given(trajectories())
def test_a_trajectory_is_a_pydantic_field(t: Trajectory) -> None:
    result = RolloutResult(rollout=t, reward=1.0)
    assert result.rollout is t  # an instance is kept, not copied (pydantic's default for models)
    assert_same(RolloutResult.model_validate_json(result.model_dump_json()).rollout, t)  # type: ignore[arg-type]
    # strands-env's eval resume: json.dumps(model_dump()) per line, json.loads + model_validate to read it back.
    line = json.dumps(result.model_dump())
    assert_same(RolloutResult.model_validate(json.loads(line)).rollout, t)  # type: ignore[arg-type]
    copied = result.model_copy(deep=True)
    assert copied.rollout is not t and copied.rollout is not None
    assert_same(copied.rollout, t)


@settings(max_examples=100, deadline=None)
@given(trajectories())
def test_model_copy_is_equal_and_independent(t: Trajectory) -> None:
    copied = t.model_copy()
    assert_same(copied, t)
    before = t.model_dump()
    copied.add_prompt([1, 2])
    copied.add_response([3], None if t.logprobs is None else [-0.5])
    assert t.model_dump() == before
    renamed = t.model_copy(update={"trajectory_id": "other"})
    assert renamed.trajectory_id == "other" and renamed.token_ids == t.token_ids and renamed.turns == t.turns


# -- hand-built trajectories: the same structure and the same checks as the model's own turns --------------------------


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 1000), min_size=1, max_size=8),
            st.lists(st.integers(0, 1000), min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_hand_built_turns_equal_the_models_turns(turns: list[tuple[list[int], list[int]]]) -> None:
    by_hand, by_model = Trajectory(trajectory_id="t"), Trajectory(trajectory_id="t")
    for prompt, output in turns:
        by_hand.add_prompt(prompt, [-1.0] * len(prompt))
        by_hand.add_response(output, [-0.5] * len(output))
        logprobs = {"prompt_logprobs": [-1.0] * len(prompt), "output_logprobs": [-0.5] * len(output)}
        by_model.append_turn(prompt, output, finish_reason="stop", **logprobs)
    assert_same(by_hand, by_model)


def test_prompt_added_by_hand_belongs_to_the_next_turn() -> None:
    t = Trajectory()
    t.add_prompt([1, 2])
    t.add_response([3], [-0.5])
    t.add_prompt([4])  # e.g. a tool result
    t.append_turn([5], [6, 7], finish_reason="stop", output_logprobs=[-0.6, -0.7])  # the model's own turn follows
    t.add_prompt([8])  # a trailing prompt, not yet answered
    assert t.segment_info == [(False, 2), (True, 1), (False, 2), (True, 2), (False, 1)]
    assert [(x.prompt_start, x.prompt_length, x.output_length) for x in t.turns] == [(0, 2, 1), (3, 2, 2)]
    assert t.turns[1].prefix_crc32 == zlib.crc32(np.array([1, 2, 3], dtype="<i4").tobytes())
    assert t.initial_prompt_length == 2 and len(t) == 8
    assert t.logprobs == [None, None, -0.5, None, None, -0.6, -0.7, None]
    assert_same(Trajectory.model_validate(t.model_dump()), t)


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("add_prompt", ([-1],)),
        ("add_prompt", ([1.0],)),
        ("add_prompt", (["7"],)),
        ("add_prompt", ([2**31],)),
        ("add_prompt", ([1, 2], [-0.5])),
        ("add_prompt", ([1], [math.nan])),
        ("add_prompt", ([1], ["x"])),
        ("add_response", ([-1],)),
        ("add_response", ([None],)),
        ("add_response", ([1, 2], [-0.5, -0.5, -0.5])),
        ("add_response", ([1], [math.nan])),
        ("add_routed_experts", ("not base64!",)),
        ("add_routed_experts", (routing(3)[:-4],)),  # not whole rows for the turn
        ("add_routed_experts", (routing(6),)),  # the last turn has its slice already
        ("add_routed_experts", (7,)),
    ],
)
def test_bad_hand_built_input_is_refused_and_changes_nothing(call: str, args: tuple[Any, ...]) -> None:
    t = Trajectory()
    t.add_prompt([1, 2, 3])
    t.add_response([4, 5, 6], [-0.5, -0.25, -0.125])
    if args == (routing(6),):
        t.add_routed_experts(routing(5))
    before = (t.model_dump(), bytes(t.packed_ids), bytes(t.packed_logprobs), bytes(t.ids_json), t.crc32)
    with pytest.raises(TrajectoryError):
        getattr(t, call)(*args)
    assert (t.model_dump(), bytes(t.packed_ids), bytes(t.packed_logprobs), bytes(t.ids_json), t.crc32) == before


def test_lists_given_to_the_constructor_are_refused_model_validate_takes_them() -> None:
    with pytest.raises(TrajectoryError, match="model_validate"):
        Trajectory(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[None, -0.5, -0.5])
    t = Trajectory.model_validate({"token_ids": [1, 2, 3], "segment_info": [(False, 1), (True, 2)]})
    assert t.loss_mask == [0, 1, 1] and [(x.prompt_length, x.output_length) for x in t.turns] == [(1, 2)]


def test_hand_built_order_rules() -> None:
    with pytest.raises(TrajectoryError, match="first segment must be a prompt"):
        Trajectory().add_response([1])
    with pytest.raises(TrajectoryError, match="belong to a turn"):
        Trajectory().add_routed_experts(routing(1))
    t = Trajectory()
    t.add_prompt([])
    t.add_response([])
    assert len(t) == 0 and not t.turns  # empty segments add nothing, as in 0.6
    t.add_prompt([1])
    t.add_response([2, 3])
    t.add_response([4])  # two responses in a row: two turns, one output run
    assert [(x.prompt_length, x.output_length) for x in t.turns] == [(1, 2), (0, 1)]
    assert t.segment_info == [(False, 1), (True, 3)]


# -- strands-sglang 0.6.2's dumps and bad input ------------------------------------------------------------------------


def test_a_real_strands_sglang_062_dump_loads_and_rebuilds_the_same_rollout() -> None:
    text = ROLLOUT_062.read_text()
    fields = json.loads(text)
    loaded = Trajectory.model_validate_json(text)
    assert loaded.token_ids == fields["token_ids"]
    assert loaded.loss_mask == fields["loss_mask"]
    assert loaded.logprobs == fields["logprobs"]
    assert loaded.segment_info == [tuple(s) for s in fields["segment_info"]]
    assert loaded.routed_experts == fields["routed_experts"]
    assert loaded.image_data == fields["image_data"]
    assert loaded.decode_routed_experts(1, 1).shape == (len(loaded) - 1, 1, 1)
    # The same calls on strands-tito give the same rollout (0.6.2 set image_data by assignment; here the first turn
    # holds the images).
    by_hand = Trajectory(trajectory_id=loaded.trajectory_id)
    ids, logprobs, position = fields["token_ids"], fields["logprobs"], 0
    for is_output, length in fields["segment_info"]:
        add = by_hand.add_response if is_output else by_hand.add_prompt
        add(ids[position : position + length], logprobs[position : position + length])
        if is_output:
            by_hand.add_routed_experts(fields["routed_experts"][len(by_hand.turns) - 1])
        position += length
    assert loaded.token_ids == by_hand.token_ids and loaded.logprobs == by_hand.logprobs
    assert [t.routed_experts for t in loaded.turns] == [t.routed_experts for t in by_hand.turns]
    in_a_model = RolloutResult.model_validate({"rollout": fields}).rollout
    assert in_a_model is not None and (in_a_model.token_ids, in_a_model.turns) == (loaded.token_ids, loaded.turns)


def _tampered(change: str) -> dict[str, Any]:  # noqa: C901  one branch per tampering, read as a table
    t = Trajectory()
    t.append_turn(
        [1, 2, 3], [4, 5], finish_reason="stop", output_logprobs=[-1, -2], routed_experts=routing(4),
        image_data=[image(0)],
    )  # fmt: skip
    t.append_turn([6], [7, 8], finish_reason="length", output_logprobs=[-1, -2], routed_experts=routing(3))
    fields: dict[str, Any] = dict(t.model_dump())
    match change:
        case "loss_mask":
            fields["loss_mask"][0] = 1
        case "segment_info":
            fields["segment_info"][0] = (False, 2)
        case "extra_key":
            fields["tokens"] = []
        case "routed_experts":
            fields["routed_experts"].pop()
        case "image_data":
            fields["image_data"].append(image(1))
        case "bad_image":
            fields["image_data"] = ["not a data url"]
        case "turn_length":
            fields["turns"][1]["output_length"] = 9
        case "finish_reason":
            fields["turns"][0]["finish_reason"] = "done"
        case "logprobs":
            fields["logprobs"] = fields["logprobs"][:-1]
        case "token_id":
            fields["token_ids"][3] = -4
        case "turn_shape":
            fields["turns"][0] = "a turn"
        case "turn_field_type":
            fields["turns"][0]["latency_s"] = "slow"
        case "turn_field_missing":
            del fields["turns"][1]["cached_tokens"]
        case "trajectory_id":
            fields["trajectory_id"] = 7
    return fields


@pytest.mark.parametrize(
    "change",
    [
        "loss_mask",
        "segment_info",
        "extra_key",
        "routed_experts",
        "image_data",
        "bad_image",
        "turn_length",
        "finish_reason",
        "logprobs",
        "token_id",
        "turn_shape",
        "turn_field_type",
        "turn_field_missing",
        "trajectory_id",
    ],
)
def test_inconsistent_fields_are_a_clear_validation_error(change: str) -> None:
    fields = _tampered(change)
    with pytest.raises(TrajectoryError):
        Trajectory.model_validate(fields)
    with pytest.raises(ValidationError, match="rollout"):
        RolloutResult.model_validate({"rollout": fields})


def test_not_a_trajectory_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="expected a Trajectory or a dict of its fields, got list"):
        RolloutResult.model_validate({"rollout": [1, 2]})


def test_the_json_schema_describes_the_fields() -> None:
    schema = RolloutResult.model_json_schema()
    fields = schema["$defs"]["TrajectoryFields"]["properties"]
    assert {"token_ids", "loss_mask", "logprobs", "segment_info", "routed_experts", "image_data", "turns"} <= {*fields}
