"""The trajectory keeps its invariants in one place: a bad turn changes nothing."""

import base64
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strands_tito import trajectory as trajectory_module
from strands_tito.trajectory import PromptIds, Trajectory, TrajectoryError, decode_routed_experts


def routing(rows: int, layers: int = 2, k: int = 2, offset: int = 0) -> str:
    data = np.arange(offset, offset + rows * layers * k, dtype="<i4")
    return base64.b64encode(data.tobytes()).decode()


def two_turns() -> Trajectory:
    t = Trajectory()
    t.append_turn([1, 2, 3], [4, 5], finish_reason="stop", output_logprobs=[-0.1, -0.2], prompt_tokens=3)
    t.append_turn([6], [7, 8], finish_reason="length", prompt_logprobs=[-1.0], output_logprobs=[-0.3, None])
    return t


def test_turns_build_flat_arrays_and_segments() -> None:
    t = two_turns()
    assert t.token_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert t.loss_mask == [0, 0, 0, 1, 1, 0, 1, 1]
    assert t.output_mask == [bool(m) for m in t.loss_mask]
    assert t.logprobs == [None, None, None, -0.1, -0.2, -1.0, -0.3, None]
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


_ids = st.lists(st.one_of(st.integers(-3, 2**31 + 3), st.sampled_from([True, 1.0, "7", None])), max_size=80)
_logprobs = st.one_of(
    st.none(),
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True), st.none(), st.integers(-5, 5), st.sampled_from(["-1", True])
        ),
        max_size=80,
    ),
)


def _outcome(monkeypatch: pytest.MonkeyPatch, small: int, *args: object) -> object:
    monkeypatch.setattr(trajectory_module, "_SMALL", small)
    t = two_turns()
    t.trajectory_id = "same"
    prompt, output, prompt_logprobs, output_logprobs = args
    try:
        t.append_turn(
            prompt,  # type: ignore[arg-type]
            output,  # type: ignore[arg-type]
            finish_reason="stop",
            prompt_logprobs=prompt_logprobs,  # type: ignore[arg-type]
            output_logprobs=output_logprobs,  # type: ignore[arg-type]
        )
    except TrajectoryError as e:
        return str(e)
    # NaN is the packed form of None, so compare the bytes, and the lists with NaN-safe repr.
    return repr(t.to_dict()), bytes(t.packed_ids), bytes(t.packed_logprobs), t.crc32, bytes(t.ids_json)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompt=_ids, output=_ids, prompt_logprobs=_logprobs, output_logprobs=_logprobs)
def test_short_turns_are_checked_without_numpy_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
    prompt: list[object],
    output: list[object],
    prompt_logprobs: list[object] | None,
    output_logprobs: list[object] | None,
) -> None:
    """Short id and logprob lists take a plain-Python path: same trajectory, same bytes, same errors as numpy's."""
    args = (prompt, output, prompt_logprobs, output_logprobs)
    assert _outcome(monkeypatch, 64, *args) == _outcome(monkeypatch, -1, *args)


_float_logprobs = st.builds(
    lambda first, body, tail: [*first, *body, *tail],
    st.sampled_from([[], [None]]),
    st.lists(st.floats(-1e3, 0.0, width=32), min_size=65, max_size=100),
    st.lists(st.sampled_from([math.nan, math.inf, -math.inf, None, -1e300, 3.4e38, -0.5]), max_size=3),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prompt_logprobs=_float_logprobs,
    output_logprobs=_float_logprobs,
    rng=st.randoms(use_true_random=False),
    lead=st.booleans(),
)
def test_long_float_logprobs_are_packed_without_numpy_with_the_same_result(
    monkeypatch: pytest.MonkeyPatch,
    prompt_logprobs: list[float | None],
    output_logprobs: list[float | None],
    rng: random.Random,
    lead: bool,
) -> None:
    """Long lists of floats (a None first allowed) are packed by ``array`` and checked by ``sum``: the same
    trajectory, bytes and errors as the numpy path."""
    rng.shuffle(prompt_logprobs)
    if lead and prompt_logprobs[0] is not None:
        prompt_logprobs.insert(0, None)
    args = (
        list(range(len(prompt_logprobs))),
        list(range(len(output_logprobs))),
        prompt_logprobs,
        output_logprobs,
    )
    fast = _outcome(monkeypatch, -1, *args)
    with monkeypatch.context() as patch:  # undone before the next example
        patch.setattr(trajectory_module, "_pack_float_logprobs", lambda values: None)
        assert fast == _outcome(monkeypatch, -1, *args)


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
