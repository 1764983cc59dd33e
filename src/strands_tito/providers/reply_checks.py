"""Reply-shape checks for per-token data (SGLang's ``[logprob, id, text]`` entries, vLLM's keyed entries).

The validity rules themselves (what a token id and a logprob may be, where one may be missing) are
:mod:`strands_tito.checks`, the same functions the trajectory and the span decoder apply, so a reply accepted here is
one the collector accepts. Here is only the shape: one entry per expected token, each naming that token. A reply to
a turn that brings in a long tool result carries one entry per new prompt token (32k for a 32k-token file), so the
entries are taken apart in a few C-level passes; a per-entry loop runs only to name a bad entry.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from strands_tito import checks
from strands_tito.checks import Missing, is_token_id_list

__all__ = ["finite_logprobs", "is_token_id_list", "keyed_logprobs", "triple_logprobs"]

ErrorType = Callable[[str], Exception]
_SEQUENCE_KINDS = frozenset({list, tuple})


def finite_logprobs(
    values: Sequence[Any], where: str, error: ErrorType, *, missing: Missing = "anywhere"
) -> list[float | None]:
    """Logprobs from a reply under :func:`strands_tito.checks.logprobs`' rule (``missing`` says where None may be)."""
    return checks.logprobs(values, where, error, missing=missing)[0]


def triple_logprobs(
    entries: Any,
    expected_ids: Sequence[int],
    where: str,
    error: ErrorType,
    *,
    missing: Missing,
    value_error: ErrorType | None = None,
) -> list[float | None]:
    """Logprobs of SGLang ``[logprob, token_id, text]`` entries, one per expected token.

    Each entry must be a list (or tuple) of at least two items whose second is the expected token (else ``error``);
    the first items are checked as by :func:`finite_logprobs` (else ``value_error``, by default ``error``).
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
                return finite_logprobs(logprobs, where, value_error or error, missing=missing)
    for i, (entry, token) in enumerate(zip(entries, expected_ids, strict=True)):
        if not isinstance(entry, list | tuple) or len(entry) < 2 or entry[1] != token:
            raise error(f"{where}[{i}]: entry {entry!r:.200} does not describe token {token}")
    return finite_logprobs([entry[0] for entry in entries], where, value_error or error, missing=missing)


def keyed_logprobs(
    entries: Any,
    expected_ids: Sequence[int],
    where: str,
    error: ErrorType,
    *,
    missing: Missing,
    value_error: ErrorType | None = None,
    id_key: str = "token_id",
    logprob_key: str = "logprob",
) -> list[float | None]:
    """Logprobs of entries that are objects (``{"token_id": ..., "logprob": ...}``, vLLM), one per expected token;
    errors as :func:`triple_logprobs`."""
    if not isinstance(entries, list) or len(entries) != len(expected_ids):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise error(f"{where}: expected {len(expected_ids)} entries, got {got}")
    if not entries:
        return []
    if set(map(type, entries)) == {dict}:
        ids = list(map(dict.get, entries, itertools.repeat(id_key)))
        expected = expected_ids if isinstance(expected_ids, list) else list(expected_ids)
        if ids == expected:
            values = list(map(dict.get, entries, itertools.repeat(logprob_key)))
            return finite_logprobs(values, where, value_error or error, missing=missing)
    for i, (entry, token) in enumerate(zip(entries, expected_ids, strict=True)):
        if not isinstance(entry, dict) or entry.get(id_key) != token:
            raise error(f"{where}[{i}]: entry {entry!r:.200} does not describe token {token}")
    values = [entry.get(logprob_key) for entry in entries]
    return finite_logprobs(values, where, value_error or error, missing=missing)
