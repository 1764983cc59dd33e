"""The trajectory keeps its invariants in one place: a bad turn changes nothing."""

import base64
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strands_tito.trajectory import PromptIds, Trajectory, TrajectoryError, decode_routed_experts


def routing(rows: int, layers: int = 2, k: int = 2, offset: int = 0) -> str:
    data = np.arange(offset, offset + rows * layers * k, dtype="<i4")
    return base64.b64encode(data.tobytes()).decode()


def two_turns() -> Trajectory:
    t = Trajectory()
    t.append_turn([1, 2, 3], [4, 5], finish_reason="stop", output_logprobs=[-0.1, -0.2], prompt_tokens=3)
    t.append_turn([6], [7, 8], finish_reason="length", prompt_logprobs=[-1.0], output_logprobs=[-0.3, -0.4])
    return t


def test_turns_build_flat_arrays_and_segments() -> None:
    t = two_turns()
    assert t.token_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert t.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert t.output_mask == [bool(m) for m in t.loss_mask]
    assert t.logprobs == [None, None, None, -0.1, -0.2, -1.0, -0.3, -0.4]
    assert t.segment_info == [(False, 3), (True, 2), (False, 1), (True, 2)]
    assert len(t.segments[0]) == t.initial_prompt_length == 3
    assert [(x.prompt_start, x.prompt_length, x.output_length, x.finish_reason) for x in t.turns] == [
        (0, 3, 2, "stop"),
        (5, 1, 2, "length"),
    ]
    assert t.to_dict()["segments"] == [[False, 3], [True, 2], [False, 1], [True, 2]]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prompt_ids": [9], "output_ids": [], "finish_reason": "stop"},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "output_logprobs": [-1.0, -2.0]},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "output_logprobs": [math.nan]},
        # A generated token without its logprob while the turn's others have one: never training data.
        {"prompt_ids": [9], "output_ids": [1, 2], "finish_reason": "stop", "output_logprobs": [-1.0, None]},
        # Finite as a double, infinite as the float32 that spans and records store: refused here, not downstream.
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "output_logprobs": [-1e39]},
        {"prompt_ids": [9], "output_ids": [2**31], "finish_reason": "stop"},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "prompt_logprobs": []},
        {"prompt_ids": [9], "output_ids": [-1], "finish_reason": "stop"},
        {"prompt_ids": [9], "output_ids": ["1"], "finish_reason": "stop"},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "done"},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "prompt_tokens": 5},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "routed_experts": "not base64!"},
        {"prompt_ids": [9], "output_ids": [1], "finish_reason": "stop", "routed_experts": routing(3)[:-4]},
    ],
)
def test_bad_turn_leaves_trajectory_unchanged(kwargs: dict) -> None:  # type: ignore[type-arg]
    t = two_turns()
    before = t.to_dict()
    with pytest.raises(TrajectoryError):
        t.append_turn(**kwargs)
    assert t.to_dict() == before


def test_first_turn_needs_a_prompt() -> None:
    with pytest.raises(TrajectoryError, match="non-empty prompt"):
        Trajectory().append_turn([], [1], finish_reason="stop")


def test_routed_experts_join_to_one_row_per_position_but_the_last() -> None:
    t = Trajectory()
    t.append_turn([1, 2, 3], [4, 5], finish_reason="stop", routed_experts=routing(4))
    t.append_turn([6], [7, 8], finish_reason="stop", routed_experts=routing(3, offset=1000))
    decoded = t.decode_routed_experts(2, 2)
    assert decoded.shape == (len(t) - 1, 2, 2) and decoded.dtype == np.int32
    assert decoded[4, 0, 0] == 1000
    assert np.array_equal(decode_routed_experts(t.routed_experts, num_layers=2, top_k=2), decoded)
    with pytest.raises(ValueError, match="rows"):
        decode_routed_experts(t.routed_experts, num_layers=3, top_k=5)


def test_packed_views_follow_the_lists() -> None:
    t = two_turns()
    assert bytes(t.packed_ids) == np.asarray(t.token_ids, dtype="<i4").tobytes()
    floats = np.frombuffer(bytes(t.packed_logprobs), dtype="<f4")
    assert [None if np.isnan(v) else float(np.float32(v)) for v in floats] == [
        None if v is None else float(np.float32(v)) for v in t.logprobs
    ]
    import zlib

    assert t.crc32 == zlib.crc32(bytes(t.packed_ids))


def test_request_json_is_kept_incrementally() -> None:
    import json

    t = two_turns()
    assert json.loads(t.input_ids_json([9, 10])) == [*t.token_ids, 9, 10]
    assert json.loads(t.input_ids_json([])) == t.token_ids
    assert json.loads(Trajectory().input_ids_json([5])) == [5]


@settings(max_examples=200, deadline=None)
@given(
    context=st.lists(st.integers(0, 99), max_size=12),
    new=st.lists(st.integers(0, 99), max_size=6),
    later=st.lists(st.integers(0, 99), max_size=6),
    index=st.integers(-25, 25),
    start=st.none() | st.integers(-25, 25),
    stop=st.none() | st.integers(-25, 25),
    step=st.none() | st.sampled_from([1, 2, -1, -3]),
)
def test_prompt_ids_behave_like_the_list_they_stand_for(
    context: list[int],
    new: list[int],
    later: list[int],
    index: int,
    start: int | None,
    stop: int | None,
    step: int | None,
) -> None:
    """A request's prompt is a view of the trajectory plus the new ids: the same as the concatenated list, also after
    the trajectory grew past it."""
    ids = PromptIds(context, new)
    expected = context + new
    context.extend(later)  # the trajectory grows after the request; the view still covers the ids it was made of
    assert list(ids) == expected and len(ids) == len(expected)
    assert ids == expected and expected == ids and ids == PromptIds(list(expected), [])
    assert ids != [*expected, 0]
    assert ids != expected[:-1] or not expected
    assert ids[start:stop:step] == expected[start:stop:step]
    if -len(expected) <= index < len(expected):
        assert ids[index] == expected[index]
    else:
        with pytest.raises(IndexError):
            ids[index]
