"""One rule, one place: what the provider accepts, the trajectory and the collector accept, and the fast array paths
decide exactly as the per-entry rule does."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strands_tito import checks, spans
from strands_tito.assembly import chain_turn
from strands_tito.checks import FLOAT32_OVERFLOW, Missing
from strands_tito.providers.sglang import SGLangResponseError, parse_reply
from strands_tito.trajectory import Trajectory, TrajectoryError

MISSING: list[Missing] = ["anywhere", "first", "never", "all_or_none"]


class Refused(ValueError):
    pass


def outcome(values: list[Any], missing: Missing) -> tuple[str, Any]:
    try:
        checked, packed = checks.logprobs(values, "lp", Refused, missing=missing)
    except Refused as e:
        return "error", str(e)
    return "ok", (repr(checked), packed)


def per_entry(values: list[Any], missing: Missing) -> tuple[str, Any]:
    """The rule entry by entry (``checks.logprob_value``), as :func:`outcome` reports it: what every path must equal."""
    all_missing = values.count(None) == len(values)
    out: list[float | None] = []
    try:
        for i, value in enumerate(values):
            ok = missing == "anywhere" or (missing == "first" and i == 0) or (missing == "all_or_none" and all_missing)
            out.append(checks.logprob_value(value, f"lp[{i}]", Refused, missing_ok=ok))
    except Refused as e:
        return "error", str(e)
    with np.errstate(over="ignore"):
        return "ok", (repr(out), np.array(out, dtype=np.float64).astype("<f4").tobytes())


_value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e3, 0.0, width=32),
    st.none(),
    st.integers(-5, 5),
    st.sampled_from(["-1", True, -1e39, 3.4e38, -FLOAT32_OVERFLOW, -math.nextafter(FLOAT32_OVERFLOW, 0), -(10**400)]),
)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(_value, max_size=90), missing=st.sampled_from(MISSING))
def test_fast_paths_decide_as_the_per_entry_rule(values: list[Any], missing: Missing) -> None:
    """The plain-Python, ``array``/``sum`` and numpy paths give the per-entry rule's result, bytes and error."""
    assert outcome(values, missing) == per_entry(values, missing)


_floats_long = st.builds(
    lambda first, body, tail: [*first, *body, *tail],
    st.sampled_from([[], [None]]),
    st.lists(st.floats(-1e3, 0.0, width=32), min_size=65, max_size=100),
    st.lists(st.sampled_from([math.nan, math.inf, -math.inf, None, -1e300, -1e39, 3.4e38, -0.5]), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(values=_floats_long, rng=st.randoms(use_true_random=False), missing=st.sampled_from(MISSING))
def test_long_float_lists_take_the_packed_path_with_the_same_result(
    values: list[Any], rng: random.Random, missing: Missing
) -> None:
    rng.shuffle(values)
    fast = outcome(values, missing)
    assert fast == per_entry(values, missing)
    if fast[0] == "ok":  # the reply's own float objects are kept
        checked, _ = checks.logprobs(values, "lp", Refused, missing=missing)
        assert checked is values


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_value, max_size=80), missing=st.sampled_from(MISSING))
def test_the_list_rule_and_the_array_rule_agree(values: list[Any], missing: Missing) -> None:
    """Logprobs as a provider holds them (None = missing) and as a span carries them (NaN = missing) are accepted
    and refused alike, whichever encoding the span uses."""
    if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
        return  # no span can carry a string or a bool
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return  # NaN is the array form of None
    as_list = outcome(values, missing)[0] == "ok"
    array = [math.nan if v is None else v for v in values]
    for value in (array, spans.encode_logprobs(values, "packed") if as_list else array):
        try:
            checks.logprob_array(value, "lp", Refused, missing=missing)
        except Refused:
            as_array = False
        else:
            as_array = True
        assert as_array == as_list, (values, value)


_reply_logprob = st.one_of(
    st.floats(-30.0, 0.0),
    st.sampled_from([None, math.nan, math.inf, -1e39, -1e300, -3.4e38, 0, -2, True]),
)


@settings(max_examples=300, deadline=None)
@given(
    prompt_lps=st.lists(_reply_logprob, min_size=3, max_size=8),
    output_lps=st.lists(_reply_logprob, min_size=1, max_size=8),
    encoding=st.sampled_from(["packed", "array"]),
)
def test_what_the_provider_accepts_the_collector_accepts(
    prompt_lps: list[Any], output_lps: list[Any], encoding: spans.Encoding
) -> None:
    """An SGLang reply the provider accepts becomes a turn, a span, and a turn the collector assembles: no value
    passes the provider and fails later (``-1e39`` used to become ``-inf`` in float32 and be refused there)."""
    first = Trajectory()
    first.append_turn([1, 2, 3], [4], finish_reason="stop", output_logprobs=[-0.5])
    prompt = list(range(10, 10 + len(prompt_lps) - 1))
    output = list(range(100, 100 + len(output_lps)))
    input_ids = [*first.token_ids, *prompt]
    start = len(first) - 1
    reply = {
        "text": "x",
        "output_ids": output,
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": output[-1]},
            "prompt_tokens": len(input_ids),
            "input_token_logprobs": [[lp, t, None] for lp, t in zip(prompt_lps, input_ids[start:], strict=True)],
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(output_lps, output, strict=True)],
        },
    }
    try:
        parsed = parse_reply(reply, input_ids, len(prompt), start, want_logprobs=True, want_routed=False)
    except SGLangResponseError:
        return
    assert parsed.output_logprobs is not None and None not in parsed.output_logprobs
    turn = first.append_turn(
        prompt,
        parsed.output_ids,
        finish_reason=parsed.finish_reason,
        prompt_logprobs=parsed.prompt_logprobs,
        output_logprobs=parsed.output_logprobs,
    )
    attributes = spans.turn_attributes(
        first.trajectory_id,
        1,
        turn.prompt_start,
        turn.prefix_crc32,
        prompt,
        parsed.prompt_logprobs or [],
        parsed.output_ids,
        parsed.output_logprobs,
        finish_reason=parsed.finish_reason,
        encoding=encoding,
    )
    decoded = spans.decode_span(attributes)
    assert isinstance(decoded, spans.TurnSpan)
    rebuilt = Trajectory()
    rebuilt.append_turn([1, 2, 3], [4], finish_reason="stop", output_logprobs=[-0.5])
    assert chain_turn(rebuilt, 1, decoded) is None
    assert rebuilt.packed_logprobs == first.packed_logprobs


@pytest.mark.parametrize(
    ("output_logprobs", "accepted"),
    [([-0.1, -0.2], True), (None, True), ([None, None], False), ([-0.1, None], False), ([None, -0.1], False)],
)
def test_a_generated_token_never_holds_a_missing_logprob(
    output_logprobs: list[float | None] | None, accepted: bool
) -> None:
    """A turn's generated tokens all have a real logprob, or the turn carries none (``None``: the trajectory then
    holds no logprob array at all); never a hole at loss-mask 1, not even all holes."""
    t = Trajectory()
    if accepted:
        t.append_turn([1], [2, 3], finish_reason="stop", output_logprobs=output_logprobs)
        assert t.logprobs == (None if output_logprobs is None else [None, *output_logprobs])
        assert t.to_dict()["logprobs"] == t.logprobs and (output_logprobs is not None or not t.packed_logprobs)
    else:
        with pytest.raises(TrajectoryError, match="logprob is missing"):
            t.append_turn([1], [2, 3], finish_reason="stop", output_logprobs=output_logprobs)
        assert t.logprobs == [] and not t.turns
    # Span arrays written before a turn could lack logprobs were all NaN for such a turn: still read, as absence.
    array = [math.nan if v is None else v for v in output_logprobs or [None, None]]
    if accepted or output_logprobs == [None, None]:
        checks.logprob_array(array, "lp", Refused, missing="all_or_none")
    else:
        with pytest.raises(Refused, match="missing"):
            checks.logprob_array(array, "lp", Refused, missing="all_or_none")


@pytest.mark.parametrize("first_has", [True, False])
def test_a_trajectory_records_logprobs_for_every_turn_or_for_none(first_has: bool) -> None:
    """The rule (``checks.logprobs_presence``): a turn that would mix is refused, naming why, and nothing changes."""
    with pytest.raises(Refused, match=r"earlier turns (lack|have) them"):
        checks.logprobs_presence(first_has, not first_has, "turn 1", Refused)
    assert checks.logprobs_presence(None, first_has, "turn 0", Refused) is first_has
    t = Trajectory()
    t.append_turn([1], [2], finish_reason="stop", output_logprobs=[-0.5] if first_has else None)
    before = t.to_dict()
    with pytest.raises(TrajectoryError, match="records logprobs for every turn or for none"):
        t.append_turn([3], [4], finish_reason="stop", output_logprobs=None if first_has else [-0.5])
    assert t.to_dict() == before
    with pytest.raises(TrajectoryError, match="for every turn or for none"):
        t.expect_logprobs(not first_has)
    t.append_turn([3], [4], finish_reason="stop", output_logprobs=[-0.5] if first_has else None)
    assert (t.logprobs is None) is not first_has
    assert Trajectory.model_validate(t.model_dump()).to_dict() == t.to_dict()


def test_logprobs_of_prompt_tokens_need_a_trajectory_that_records_logprobs() -> None:
    t = Trajectory()
    t.add_prompt([1, 2], [None, -0.3])
    with pytest.raises(TrajectoryError, match="prompt tokens were added with real ones"):
        t.append_turn([], [3], finish_reason="stop")
    bare = Trajectory()
    bare.append_turn([1], [2], finish_reason="stop")
    with pytest.raises(TrajectoryError, match="records none"):
        bare.add_prompt([3], [-0.1])
    with pytest.raises(TrajectoryError, match="prompt_logprobs given for a turn without output logprobs"):
        bare.append_turn([3], [4], finish_reason="stop", prompt_logprobs=[-0.2])
    bare.add_prompt([3])
    assert bare.logprobs is None and bare.token_ids == [1, 2, 3]


def test_token_ids_are_int32() -> None:
    assert checks.is_token_id_list([0, 2**31 - 1])
    assert not checks.is_token_id_list([2**31])
    with pytest.raises(Refused, match="int32"):
        checks.token_ids([2**31], "ids", Refused)
    with pytest.raises(Refused, match="int32"):
        checks.token_id_array([2**31], "ids", Refused)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({spans.WEIGHT_VERSIONS: b"not json"}, "not JSON"),
        ({spans.WEIGHT_VERSIONS: b'[{"version": "v1", "start": 0, "end": 3}]'}, "cover 3 output tokens"),
        ({spans.WEIGHT_VERSIONS: b'[{"version": "v1", "start": 1, "end": 2}]'}, "does not continue"),
        ({spans.WEIGHT_VERSIONS: b'[{"version": "v0", "start": 0, "end": 2}]'}, "another"),
        ({spans.WEIGHT_VERSIONS: b'[{"version": "' + b"v" * 2000 + b'", "start": 0, "end": 2}]'}, "longer"),
        ({spans.WEIGHT_VERSIONS: 7}, "must be bytes"),
        ({spans.OUTPUT_LOGPROBS: [math.nan, -0.5]}, "missing"),
        ({spans.OUTPUT_LOGPROBS: [-1e39, -0.5]}, "beyond float32"),
    ],
)
def test_the_collector_refuses_what_the_rules_refuse(change: dict[str, Any], reason: str) -> None:
    """Hostile or inconsistent span attributes get the rule's reason (the collector decodes with this decoder)."""
    runs = [checks.WeightVersionSpan("v0", 0, 1), checks.WeightVersionSpan("v1", 1, 2)]
    good = spans.turn_attributes(
        "t", 0, 0, 0, [1, 2], [None, -0.1], [3, 4], [-0.5, -0.25], finish_reason="stop", encoding="array",
        weight_version="v1", weight_versions=runs,
    )  # fmt: skip
    decoded = spans.decode_span(good)
    assert isinstance(decoded, spans.TurnSpan) and decoded.weight_versions == tuple(runs)
    with pytest.raises(spans.SpanSchemaError, match=reason):
        spans.decode_span({**good, **change})
