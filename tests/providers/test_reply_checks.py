"""The whole-array reply checks accept and reject exactly what the per-entry rule (``checks.logprob_value``) does,
with the same errors; where a logprob may be missing is the caller's ``missing``."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strands_tito import checks
from strands_tito.providers import vllm
from strands_tito.providers.reply_checks import finite_logprobs, is_token_id_list, keyed_logprobs, triple_logprobs
from strands_tito.providers.sglang import SGLangInvalidSampleError, SGLangResponseError, parse_reply
from strands_tito.providers.token_model import check_token_ids
from strands_tito.providers.vllm import VLLMResponseError


def finite_logprob(value: Any, where: str, error: Any, missing_ok: bool = True) -> float | None:
    return checks.logprob_value(value, where, error, missing_ok=missing_ok)


# -- the per-entry reference (the checks as they were written before they became whole-array passes) --------------


def ref_finite(values: Sequence[Any], where: str) -> list[float | None]:
    return [finite_logprob(v, f"{where}[{i}]", SGLangResponseError) for i, v in enumerate(values)]


def ref_triples(entries: Any, expected: Sequence[int], where: str) -> list[float | None]:
    if not isinstance(entries, list) or len(entries) != len(expected):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise SGLangResponseError(f"{where}: expected {len(expected)} entries, got {got}")
    for i, (entry, token) in enumerate(zip(entries, expected, strict=True)):  # the shape first, then the values
        if not isinstance(entry, list | tuple) or len(entry) < 2 or entry[1] != token:
            raise SGLangResponseError(f"{where}[{i}]: entry {entry!r:.200} does not describe token {token}")
    return [finite_logprob(entry[0], f"{where}[{i}]", SGLangResponseError) for i, entry in enumerate(entries)]


def ref_keyed(entries: Any, expected: Sequence[int], where: str) -> list[float | None]:
    if not isinstance(entries, list) or len(entries) != len(expected):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise VLLMResponseError(f"{where}: expected {len(expected)} entries, got {got}")
    for i, (entry, token) in enumerate(zip(entries, expected, strict=True)):
        if not isinstance(entry, dict) or entry.get("token_id") != token:
            raise VLLMResponseError(f"{where}[{i}]: entry {entry!r:.200} does not describe token {token}")
    return [finite_logprob(e.get("logprob"), f"{where}[{i}]", VLLMResponseError) for i, e in enumerate(entries)]


def ref_prompt(entries: Any, input_ids: Sequence[int], new_prompt: int, where: str) -> list[float | None]:
    if not isinstance(entries, list) or len(entries) != len(input_ids):
        raise VLLMResponseError("length")
    out: list[float | None] = []
    for position in range(len(input_ids) - new_prompt, len(input_ids)):
        entry = entries[position]
        if entry is None:
            out.append(None)
            continue
        found = entry.get(str(input_ids[position])) if isinstance(entry, dict) else None
        if not isinstance(found, dict):
            raise VLLMResponseError(f"{where}[{position}]: no entry for token {input_ids[position]}")
        out.append(found.get("logprob"))
    return [finite_logprob(v, f"{where}[{i}]", VLLMResponseError) for i, v in enumerate(out)]


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except (SGLangResponseError, VLLMResponseError) as e:
        return "error", str(e)


BAD_LOGPROBS = [math.nan, math.inf, -math.inf, True, False, "-0.5", "x", [0.1], {"a": 1}, b"1", -1e39, -1e300]
GOOD_LOGPROBS = [None, 0, -3, -0.25, 0.0, -1e-300, -3e38]


def mutations(rng: random.Random, n: int) -> list[tuple[list[Any], list[int]]]:
    """(logprobs, ids) pairs: valid ones and ones with a bad value or a wrong id at random places."""
    cases = []
    for _ in range(60):
        ids = [rng.randrange(1000) for _ in range(n)]
        values: list[Any] = [rng.choice([-rng.random(), *GOOD_LOGPROBS]) for _ in range(n)]
        roll = rng.random()
        if roll < 0.5:
            for _ in range(rng.randint(1, 3)):
                values[rng.randrange(n)] = rng.choice(BAD_LOGPROBS)
        cases.append((values, ids))
    return cases


@pytest.mark.parametrize("n", [1, 2, 7, 300])
def test_finite_logprobs_matches_the_per_entry_check(n: int) -> None:
    rng = random.Random(n)
    for values, _ in mutations(rng, n):
        fast = outcome(lambda v=values: finite_logprobs(v, "lp", SGLangResponseError))
        assert fast == outcome(lambda v=values: ref_finite(v, "lp"))
    assert finite_logprobs([], "lp", SGLangResponseError) == []
    assert finite_logprobs([None, None], "lp", SGLangResponseError) == [None, None]
    assert finite_logprobs([0, -1], "lp", SGLangResponseError) == [0.0, -1.0]
    assert all(type(v) is float for v in finite_logprobs([0, -1], "lp", SGLangResponseError))


# Long lists of floats, as a long tool result's input logprobs come: often a None first (SGLang's first position),
# sometimes a NaN, an inf, another None, or values whose sum overflows although each is finite.
_long_floats = st.builds(
    lambda first, body, tail: [*first, *body, *tail],
    st.sampled_from([[], [None]]),
    st.lists(st.floats(-1e3, 0.0), min_size=65, max_size=120),
    st.lists(st.sampled_from([math.nan, math.inf, -math.inf, None, 1.7e308, -1.7e308, -1e39, -0.5]), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(values=_long_floats, rng=st.randoms(use_true_random=False), lead=st.booleans())
def test_long_float_logprobs_take_the_sum_check_with_the_per_entry_result(
    values: list[Any], rng: random.Random, lead: bool
) -> None:
    """Floats (a None first allowed) are accepted after one ``sum``: same result and errors as the per-entry check."""
    rng.shuffle(values)  # a None or a bad value anywhere, not only at the end
    if lead and values[0] is not None:
        values.insert(0, None)
    fast = outcome(lambda: finite_logprobs(values, "lp", SGLangResponseError))
    assert fast == outcome(lambda: ref_finite(values, "lp"))
    if fast[0] == "ok":
        assert all(a is b for a, b in zip(fast[1], values, strict=True))  # the reply's own float objects


def test_float32_range_is_part_of_the_rule() -> None:
    """Finite as a double but infinite as float32 (what spans and records store) is refused here, at the reply."""
    huge = [-1.7e308] * 100
    with pytest.raises(SGLangResponseError, match=r"lp\[0\]: logprob .* beyond float32"):
        finite_logprobs(huge, "lp", SGLangResponseError)
    edge = [-3.4028234663852886e38] * 70
    assert finite_logprobs(edge, "lp", SGLangResponseError) == edge


@pytest.mark.parametrize("before", [1, 200])  # a short reply (plain loop) and a long one (numpy)
def test_a_huge_int_is_a_clear_error(before: int) -> None:
    with pytest.raises(SGLangResponseError, match=rf"lp\[{before}\]: logprob"):
        finite_logprobs([-0.5] * before + [-(10**400)], "lp", SGLangResponseError)


@pytest.mark.parametrize("n", [1, 5, 300])
def test_triples_match_the_per_entry_check(n: int) -> None:
    rng = random.Random(100 + n)
    for values, ids in mutations(rng, n):
        entries: list[Any] = [[v, t, None] for v, t in zip(values, ids, strict=True)]
        variants: list[tuple[Any, list[int]]] = [(entries, ids)]
        broken = [list(e) for e in entries]
        i = rng.randrange(n)
        choice = rng.randrange(7)
        if choice == 0:
            broken[i][1] = ids[i] + 1  # wrong token
        elif choice == 1:
            broken[i] = broken[i][:1]  # too short
        elif choice == 2:
            broken[i] = {"0": broken[i][0], "1": broken[i][1]}  # not a list
        elif choice == 3:
            broken[i] = tuple(broken[i][:2])  # a tuple of two is fine
        elif choice == 4:
            broken[i] = [broken[i][0], True if ids[i] == 1 else ids[i], "text", "extra"]  # longer is fine
        elif choice == 5:
            broken[i] = None
        else:
            broken[i] = "ab"
        variants.append((broken, ids))
        variants.append((entries[:-1], ids))  # wrong length
        for got, expected in variants:
            fast = outcome(
                lambda g=got, e=expected: triple_logprobs(g, e, "w", SGLangResponseError, missing="anywhere")
            )
            assert fast == outcome(lambda g=got, e=expected: ref_triples(g, e, "w")), (got, expected)
    assert outcome(lambda: triple_logprobs({"a": 1}, [1], "w", SGLangResponseError, missing="never")) == outcome(
        lambda: ref_triples({"a": 1}, [1], "w")
    )
    assert triple_logprobs([], [], "w", SGLangResponseError, missing="never") == []


@pytest.mark.parametrize("n", [1, 5, 300])
def test_keyed_entries_match_the_per_entry_check(n: int) -> None:
    rng = random.Random(200 + n)
    for values, ids in mutations(rng, n):
        entries: list[Any] = [{"token_id": t, "logprob": v, "token": "x"} for v, t in zip(values, ids, strict=True)]
        broken = [dict(e) for e in entries]
        i = rng.randrange(n)
        choice = rng.randrange(4)
        if choice == 0:
            broken[i]["token_id"] = ids[i] + 1
        elif choice == 1:
            del broken[i]["logprob"]  # missing logprob reads as None, as before
        elif choice == 2:
            broken[i] = [values[i], ids[i]]
        else:
            broken[i] = None
        for got in (entries, broken, entries[1:]):
            fast = outcome(lambda g=got, e=ids: keyed_logprobs(g, e, "w", VLLMResponseError, missing="anywhere"))
            assert fast == outcome(lambda g=got, e=ids: ref_keyed(g, e, "w")), got


@pytest.mark.parametrize("n", [2, 6, 300])
def test_vllm_prompt_logprobs_match_the_per_position_check(n: int) -> None:
    rng = random.Random(300 + n)
    for values, ids in mutations(rng, n):
        entries: list[Any] = [None] + [
            {str(t): {"logprob": v, "rank": 1}, "99999": {"logprob": -9.0}}
            for v, t in zip(values[1:], ids[1:], strict=True)
        ]
        broken = list(entries)
        i = rng.randrange(1, n)
        choice = rng.randrange(4)
        if choice == 0:
            broken[i] = {"99999": {"logprob": -1.0}}  # the token's own entry is missing
        elif choice == 1:
            broken[i] = None  # a null in the middle
        elif choice == 2:
            broken[i] = {str(ids[i]): -0.5}  # not an object
        else:
            broken[i] = [1]
        for new_prompt in (n, n - 1, 1):
            for got in (entries, broken):
                fast = outcome(lambda g=got, k=new_prompt, e=ids: vllm.parse_prompt_logprobs(g, e, k, "src"))
                expected = outcome(lambda g=got, k=new_prompt, e=ids: ref_prompt(g, e, k, "src prompt_logprobs"))
                assert fast == expected, (got, new_prompt)


def test_token_id_lists() -> None:
    assert is_token_id_list([]) and is_token_id_list([0, 5, 151645])
    for bad in ([1, True], [1, -1], [1.0], ["1"], [None], (1, 2), None, "12"):
        assert not is_token_id_list(bad)
        with pytest.raises(VLLMResponseError, match="not a list of token ids"):
            check_token_ids(bad, "ids", VLLMResponseError)
    assert check_token_ids([3, 4], "ids", VLLMResponseError) == [3, 4]


def _reply(input_ids: list[int], output_ids: list[int], start: int, input_lps: list[Any], output_lps: list[Any]) -> Any:
    return {
        "text": "hi",
        "output_ids": output_ids,
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": output_ids[-1]},
            "prompt_tokens": len(input_ids),
            "input_token_logprobs": [[lp, t, None] for lp, t in zip(input_lps, input_ids[start:], strict=True)],
            "output_token_logprobs": [[lp, t, None] for lp, t in zip(output_lps, output_ids, strict=True)],
        },
    }


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (math.nan, "not a finite"),
        (math.inf, "not a finite"),
        (True, "not a number"),
        ("-0.5", "not a number"),
        (None, "missing"),
        (-1e39, "beyond float32"),
    ],
)
@pytest.mark.parametrize("where", ["input", "output"])
def test_parse_reply_rejects_a_bad_logprob_anywhere(bad: Any, reason: str, where: str) -> None:
    """A null (SGLang's JSON for NaN) is refused at a generated token and at a new prompt token but the first."""
    input_ids, output_ids = list(range(10, 40)), [7, 8, 9]
    input_lps: list[Any] = [None] + [-0.5] * 20
    output_lps: list[Any] = [-0.1, -0.2, -0.3]
    (input_lps if where == "input" else output_lps)[2] = bad
    reply = _reply(input_ids, output_ids, 9, input_lps, output_lps)
    with pytest.raises(SGLangInvalidSampleError, match=rf"{where}_token_logprobs\[2\]: logprob .*{reason}"):
        parse_reply(reply, input_ids, 20, 9, want_logprobs=True, want_routed=False)


def test_parse_reply_keeps_the_new_prompt_only() -> None:
    input_ids, output_ids = list(range(10, 40)), [7, 8, 9]
    input_lps: list[Any] = [None, -1, -2] + [-0.5] * 18
    reply = _reply(input_ids, output_ids, 9, input_lps, [-0.1, -1, 0])
    parsed = parse_reply(reply, input_ids, 20, 9, want_logprobs=True, want_routed=False)
    assert parsed.prompt_logprobs == [-1.0, -2.0] + [-0.5] * 18
    assert parsed.output_logprobs == [-0.1, -1.0, 0.0]
    reply["output_ids"] = [7, True, 9]
    with pytest.raises(SGLangResponseError, match="no output_ids list of token ids"):
        parse_reply(reply, input_ids, 20, 9, want_logprobs=True, want_routed=False)
    reply = _reply(input_ids, output_ids, 9, input_lps, [-0.1, -1, 0])
    reply["meta_info"]["input_token_logprobs"][5][1] += 1
    with pytest.raises(SGLangResponseError, match=r"input_token_logprobs\[5\]: entry .* does not describe token"):
        parse_reply(reply, input_ids, 20, 9, want_logprobs=True, want_routed=False)


def test_vllm_floor_is_missing_at_a_prompt_token_and_refused_at_a_generated_one() -> None:
    """vLLM 0.33 writes -9999.0 for a missing, NaN or infinite logprob (``token_in_token_out/serving.py:85-91``;
    ``completion/serving.py:765`` floors ``-inf``): never a real value, so None at a prompt token, and a refused turn
    at an output."""
    entries: list[Any] = [None, {"11": {"logprob": checks.LOGPROB_FLOOR}}, {"12": {"logprob": -0.5}}]
    assert vllm.parse_prompt_logprobs(entries, [10, 11, 12], 2, "src") == [None, -0.5]
    with pytest.raises(vllm.VLLMInvalidSampleError, match=r"\[1\]: logprob -9999.0 is vLLM's value"):
        vllm.parse_completion_logprobs({"token_logprobs": [-0.5, -9999.0]}, [7, 8])
