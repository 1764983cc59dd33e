"""Checks of per-token reply data (logprobs, token ids) done once per array, not per element in Python.

A reply to a turn that brings in a long tool result carries one logprob entry per new prompt token (32k entries for a
32k-token file). Checking each entry with Python code costs about 0.7 µs per token; here the checks run as a few
C-level passes (``map``, list comparison, numpy) over the whole array. Every function accepts and rejects exactly what
the per-entry check (:func:`~strands_tito.providers.generation.finite_logprob` on each entry) does: when the fast path
finds anything it does not accept outright, the per-entry check runs instead and raises its precise error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, TypeGuard, cast

import numpy as np

from strands_tito.providers.generation import TokenResponseError, finite_logprob

__all__ = ["checked_logprobs", "finite_logprobs", "is_token_id_list", "keyed_logprobs", "triple_logprobs"]

_NONE = type(None)
_NUMBER_KINDS = frozenset({float, int, _NONE})  # bool is a type of its own, so it is not among them
_SEQUENCE_KINDS = frozenset({list, tuple})
# Below this many values a plain loop is cheaper than setting up numpy arrays (a short reply: ~20 tokens).
_SMALL = 64


def _slow_logprobs(
    values: Sequence[Any], where: str, error: type[TokenResponseError], *, indexed: bool = True
) -> list[float | None]:
    """The per-entry check, which names the first bad entry (``where[i]``, or ``where`` itself unless indexed)."""
    out: list[float | None] = []
    for i, value in enumerate(values):
        at = f"{where}[{i}]" if indexed else where
        try:
            out.append(finite_logprob(value, at, error))
        except OverflowError:  # an int too large for a float
            raise error(f"{at}: logprob {value!r} is not a finite number") from None
    return out


def checked_logprobs(values: Sequence[Any]) -> list[float | None] | None:
    """``values`` as floats (None kept) if every one is None or a finite ``int``/``float``; else None (no error)."""
    if not values:
        return []
    kinds = set(map(type, values))
    if not kinds <= _NUMBER_KINDS:
        return None
    if len(values) <= _SMALL:
        return _small_logprobs(values)
    if int not in kinds and _all_finite(values):  # floats and Nones: keep those objects (no second set of floats)
        return list(values)
    missing = values.count(None) if _NONE in kinds else 0
    try:
        doubles = np.array(values, dtype=np.float64)  # None becomes NaN
    except OverflowError:  # an int too large for a float
        return None
    if int(np.isfinite(doubles).sum()) + missing != len(values):
        return None
    if int not in kinds:
        return list(values)
    out: list[float | None] = doubles.tolist()
    if missing:  # every NaN is a None (a NaN value would have been counted as not finite)
        for i in np.flatnonzero(np.isnan(doubles)).tolist():
            out[i] = None
    return out


def _all_finite(values: Sequence[float | None]) -> bool:
    """Whether floats (a None first allowed, as SGLang's first input logprob is) are all finite; False is no verdict.

    One C-level ``sum``: it is finite only if every value is (an inf or NaN makes it inf or NaN). False also comes
    from any other None, or from finite values whose sum overflows; the caller then checks with numpy.
    """
    try:
        return math.isfinite(sum(cast("Sequence[float]", values[1:] if values[0] is None else values)))
    except TypeError:  # a None after the first value
        return False


def _small_logprobs(values: Sequence[float | int | None]) -> list[float | None] | None:
    """:func:`checked_logprobs` for a few values known to be None, ``int`` or ``float``: the same result, no numpy."""
    out: list[float | None] = []
    append = out.append
    isfinite = math.isfinite
    try:
        for value in values:
            if value is None:
                append(None)
                continue
            number = float(value)
            if not isfinite(number):
                return None
            append(number)
    except OverflowError:  # an int too large for a float
        return None
    return out


def finite_logprobs(values: Sequence[Any], where: str, error: type[TokenResponseError]) -> list[float | None]:
    """Logprobs from a reply, checked together: None stays None, anything but a finite number raises ``error``.

    Same result as ``[finite_logprob(v, f"{where}[{i}]", error) for i, v in enumerate(values)]``.
    """
    checked = checked_logprobs(values)
    return checked if checked is not None else _slow_logprobs(values, where, error)


def triple_logprobs(
    entries: Any, expected_ids: Sequence[int], where: str, error: type[TokenResponseError]
) -> list[float | None]:
    """Logprobs of SGLang ``[logprob, token_id, text]`` entries, one per expected token.

    Each entry must be a list (or tuple) of at least two items whose second is the expected token; its first item is
    checked as by :func:`finite_logprobs`.
    """
    if not isinstance(entries, list) or len(entries) != len(expected_ids):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise error(f"{where}: expected {len(expected_ids)} entries, got {got}")
    if not entries:
        return []
    if set(map(type, entries)) <= _SEQUENCE_KINDS:
        try:
            ids = [entry[1] for entry in entries]
            logprobs = [entry[0] for entry in entries]
        except IndexError:
            pass
        else:
            expected = expected_ids if isinstance(expected_ids, list) else list(expected_ids)
            if ids == expected:
                return finite_logprobs(logprobs, where, error)
    out: list[float | None] = []
    for i, (entry, token) in enumerate(zip(entries, expected_ids, strict=True)):
        if not isinstance(entry, list | tuple) or len(entry) < 2 or entry[1] != token:
            raise error(f"{where}[{i}]: entry {entry!r} does not describe token {token}")
        out += _slow_logprobs([entry[0]], f"{where}[{i}]", error, indexed=False)
    return out


def keyed_logprobs(
    entries: Any,
    expected_ids: Sequence[int],
    where: str,
    error: type[TokenResponseError],
    *,
    id_key: str = "token_id",
    logprob_key: str = "logprob",
) -> list[float | None]:
    """Logprobs of entries that are objects (``{"token_id": ..., "logprob": ...}``, vLLM), one per expected token."""
    if not isinstance(entries, list) or len(entries) != len(expected_ids):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise error(f"{where}: expected {len(expected_ids)} entries, got {got}")
    if not entries:
        return []
    if set(map(type, entries)) == {dict}:
        ids = list(map(dict.get, entries, itertools.repeat(id_key)))
        expected = expected_ids if isinstance(expected_ids, list) else list(expected_ids)
        if ids == expected:
            return finite_logprobs(list(map(dict.get, entries, itertools.repeat(logprob_key))), where, error)
    out: list[float | None] = []
    for i, (entry, token) in enumerate(zip(entries, expected_ids, strict=True)):
        if not isinstance(entry, dict) or entry.get(id_key) != token:
            raise error(f"{where}[{i}]: entry {entry!r} does not describe token {token}")
        out += _slow_logprobs([entry.get(logprob_key)], f"{where}[{i}]", error, indexed=False)
    return out


def is_token_id_list(value: Any) -> TypeGuard[list[int]]:
    """Whether ``value`` is a list of non-negative ``int`` token ids (``bool`` is not an id); an empty list is."""
    return isinstance(value, list) and (not value or (set(map(type, value)) == {int} and min(value) >= 0))
