"""Each validity rule for per-token data, stated once: ids, logprobs, finish reasons, routing rows, weight versions.

Every layer that takes such data calls these functions: the providers' reply checks, :class:`~strands_tito.trajectory.
Trajectory`, the span codec (which the collector decodes with), so a value the provider accepts is one the collector
accepts, and a value the collector would refuse is refused at the provider, with the reason. The rules:

- **Token id**: an ``int`` in ``[0, MAX_TOKEN_ID]`` (it is stored as int32); ids read from JSON must not be ``bool``.
- **Logprob**: an ``int``/``float`` (not ``bool``) that is finite and stays finite as float32 (its magnitude is below
  :data:`FLOAT32_OVERFLOW`), since spans and records store float32. A missing logprob (``None``; NaN in float32
  arrays) is allowed where the caller's :data:`Missing` says so; never at a generated token (``"never"``).
- **vLLM's floor** (:data:`LOGPROB_FLOOR`, ``-9999.0``): vLLM's stand-in for a missing, NaN or infinite logprob,
  never a real one: at a generated token it refuses the turn (:func:`refuse_logprob_floor`), at a prompt token it reads
  as missing (:func:`logprob_floor_as_missing`).
- **Logprobs recorded or not** (:func:`logprobs_presence`): a trajectory's turns all carry their generated tokens'
  logprobs, or none does (``return_logprob`` off); a trajectory without them holds no logprob array at all (``None``,
  ``null`` in records), never one filled with holes or numbers, and a turn that would mix the two is refused.
- **Finish reason**: one of :data:`FINISH_REASONS`.
- **Routed experts**: whole int32 rows for every position a turn routes; with a known layout ``(num_layers, top_k,
  num_experts)``, exactly ``num_layers x top_k`` ids per row, each below ``num_experts``.
- **Top-p sets** (slime's top-p replay): token ids, and one offset more than the turn's output tokens, rising from 0
  to the number of ids.
- **Weight-version spans**: ``(version, start, end)`` runs that cover a turn's output ``[0, n)`` in order.

Each function takes ``error``, the exception type (or factory) the caller raises, so each layer keeps its own error
type. The array forms run as a few C-level passes (``array``, ``sum``, numpy) and fall back to a per-entry loop only
to name the first bad value. Bottom layer: imports nothing of the project.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, TypeGuard, cast

import numpy as np
from numpy.typing import NDArray

from strands_tito.records import WeightVersionRun

__all__ = [
    "FINISH_REASONS",
    "FLOAT32_OVERFLOW",
    "LOGPROB_FLOOR",
    "MAX_INT32",
    "MAX_TOKEN_ID",
    "ErrorFactory",
    "FinishReason",
    "Missing",
    "WeightVersionSpan",
    "finish_reason",
    "is_token_id_list",
    "logprob_array",
    "logprob_floor_as_missing",
    "logprob_value",
    "logprobs",
    "logprobs_presence",
    "parse_json_spans",
    "refuse_logprob_floor",
    "routed_expert_rows",
    "token_id_array",
    "token_ids",
    "weight_version_spans",
    "weight_version_spans_json",
]

ErrorFactory = Callable[[str], Exception]
FinishReason = Literal["stop", "length", "abort"]
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort")
#: The largest int32: ids, indices and counts that spans and records store as int32 stay at or below it.
MAX_INT32 = 2**31 - 1
MAX_TOKEN_ID = MAX_INT32
#: The smallest magnitude whose float32 form is infinite (float32's largest value plus half a unit in the last
#: place; the tie rounds to infinity). A logprob must be strictly below it.
FLOAT32_OVERFLOW = 2.0**128 * (1 - 2.0**-25)
#: vLLM 0.33's value for a missing or infinite logprob (and NaN on its tokens endpoint): never a real log-probability.
LOGPROB_FLOOR = -9999.0

#: Where a logprob may be missing: ``anywhere``; only at index 0 (``first``, SGLang's input logprobs, whose first
#: entry is null by protocol); ``never``; or ``all_or_none`` (only for span arrays written before logprobs could be
#: absent, where a turn without them was all NaN; the decoder turns that into absence).
Missing = Literal["anywhere", "first", "never", "all_or_none"]

_NONE = type(None)
_NUMBER_KINDS = frozenset({float, int, _NONE})
_FLOAT_OR_NONE = frozenset({float, _NONE})
_NAN_F4 = np.array([np.nan], dtype="<f4").tobytes()
# Up to this many values, a Python ``sum`` checks packed values more cheaply than numpy (a reply: ~20 tokens).
_SMALL = 64


# -- token ids --------------------------------------------------------------------------------------------------------


def is_token_id_list(value: Any) -> TypeGuard[list[int]]:
    """Whether ``value`` is a list of token ids (``int`` in ``[0, MAX_TOKEN_ID]``, not ``bool``); ``[]`` is one."""
    if not isinstance(value, list):
        return False
    return not value or (set(map(type, value)) == {int} and min(value) >= 0 and max(value) <= MAX_TOKEN_ID)


def token_ids(values: Sequence[Any], where: str, error: ErrorFactory) -> tuple[list[int], bytes]:
    """Token ids as a list and as little-endian int32 bytes (the form spans carry and checksums cover)."""
    checked = list(values)
    try:
        packed = array("i", checked)  # C-speed: refuses floats, strings, None and values beyond int32
    except (TypeError, OverflowError):
        raise error(f"{where}: token ids must be int32 integers") from None
    if len(checked) <= _SMALL:
        negative = bool(checked) and min(checked) < 0
    else:
        negative = bool(np.frombuffer(packed, dtype=np.intc).min() < 0)
    if negative:
        raise error(f"{where}: token ids must be non-negative")
    if sys.byteorder != "little":
        packed.byteswap()
    return checked, packed.tobytes()


def token_id_array(value: Any, where: str, error: ErrorFactory) -> NDArray[Any]:
    """Token ids from packed little-endian int32 bytes or an int list, as a checked numpy array."""
    if isinstance(value, bytes):
        if len(value) % 4:
            raise error(f"{where}: {len(value)} bytes is not a whole number of 4-byte values")
        ids: NDArray[Any] = np.frombuffer(value, dtype="<i4")
    elif isinstance(value, list | tuple) and set(map(type, value)) <= {int}:  # one C-level pass
        try:
            ids = np.array(value, dtype=np.int64)
        except OverflowError:
            raise error(f"{where}: token id out of range") from None
    else:
        raise error(f"{where}: expected packed int32 bytes or an int array, got {type(value).__name__}")
    if ids.size and ids.min() < 0:
        raise error(f"{where}: negative token id")
    if ids.dtype != np.dtype("<i4") and ids.size and ids.max() > MAX_TOKEN_ID:
        raise error(f"{where}: token id beyond int32")
    return ids


# -- logprobs ---------------------------------------------------------------------------------------------------------


def logprob_value(value: Any, where: str, error: ErrorFactory, *, missing_ok: bool = True) -> float | None:
    """One logprob under the rule (the per-entry form, which names what is wrong)."""
    if value is None:
        if missing_ok:
            return None
        raise error(
            f"{where}: logprob is missing (null: the server's value was NaN or infinite); a generated token without "
            "its real logprob is never recorded as training data"
        )
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise error(f"{where}: logprob {value!r} is not a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise error(f"{where}: logprob {value!r} is not a finite number")
    if abs(number) >= FLOAT32_OVERFLOW:
        raise error(f"{where}: logprob {value!r} is beyond float32's range")
    return number


def refuse_logprob_floor(values: list[float | None], where: str, error: ErrorFactory) -> list[float | None]:
    """Generated tokens' logprobs, none of them vLLM's floor for a missing one (one C-level pass), else ``error``."""
    if LOGPROB_FLOOR in values:
        raise error(
            f"{where}[{values.index(LOGPROB_FLOOR)}]: logprob -9999.0 is vLLM's value for a missing, NaN or infinite "
            "logprob; a generated token without its real logprob is never recorded as training data"
        )
    return values


def logprob_floor_as_missing(values: list[Any]) -> list[Any]:
    """Logprob values with vLLM's floor read as what it stands for: missing (``None``)."""
    if LOGPROB_FLOOR in values:
        return [None if v == LOGPROB_FLOOR and v is not True else v for v in values]
    return values


def logprobs(
    values: Sequence[Any], where: str, error: ErrorFactory, *, missing: Missing
) -> tuple[list[float | None], bytes]:
    """Logprobs under the rule, as a list (``None`` where missing) and as little-endian float32 bytes (NaN there).

    Float values keep their objects (no second list of floats for a reply's 32k-entry array).
    """
    items = values if isinstance(values, list) else list(values)
    if not items:
        return [], b""
    kinds = set(map(type, items))
    if kinds <= _FLOAT_OR_NONE:
        packed = _pack_floats(cast("list[float | None]", items), missing)
        if packed is not None:
            return cast("list[float | None]", items), packed
    if kinds <= _NUMBER_KINDS:
        checked = _numeric(items, kinds, missing)
        if checked is not None:
            return checked
    return _slow(items, where, error, missing)


def _pack_floats(values: list[float | None], missing: Missing) -> bytes | None:
    """Float32 bytes if every value is a float that stays finite as float32, a None allowed only first; else None
    (no verdict). Two C-level passes: ``array("f")`` (which refuses a None and turns values beyond float32 into
    infinities) and a finiteness check of the packed values, which catches NaN, infinities and those."""
    first_missing = values[0] is None
    if first_missing and missing in ("never", "all_or_none"):
        return None
    try:
        packed = array("f", cast("list[float]", values[1:] if first_missing else values))
    except TypeError:  # another None
        return None
    # An infinity or NaN in the packed values makes their sum non-finite, and float32 values cannot overflow a
    # double sum; numpy is cheaper only for long arrays.
    if len(packed) <= _SMALL:
        if not math.isfinite(sum(packed)):
            return None
    elif not np.isfinite(np.frombuffer(packed, dtype=np.float32)).all():
        return None
    if sys.byteorder != "little":
        packed.byteswap()
    return (_NAN_F4 if first_missing else b"") + packed.tobytes()


def _numeric(items: list[Any], kinds: set[type], missing: Missing) -> tuple[list[float | None], bytes] | None:
    """The numpy path for ints, floats and Nones: the result if all follow the rule, else None (no verdict)."""
    try:
        doubles = np.array(items, dtype=np.float64)  # None becomes NaN
    except OverflowError:  # an int too large for a float
        return None
    absent = np.isnan(doubles)
    n_absent = int(absent.sum())
    n_none = items.count(None) if _NONE in kinds else 0
    if n_absent != n_none:  # a NaN value
        return None
    if n_none and not _missing_allowed(items, n_none, missing):
        return None
    present = doubles[~absent] if n_none else doubles
    if present.size and not (np.abs(present) < FLOAT32_OVERFLOW).all():  # also false for infinities
        return None
    with np.errstate(over="ignore"):
        packed = doubles.astype("<f4").tobytes()
    if int not in kinds:
        return cast("list[float | None]", items), packed
    out: list[float | None] = doubles.tolist()
    for i in np.flatnonzero(absent).tolist():
        out[i] = None
    return out, packed


def _missing_allowed(items: Sequence[Any], n_none: int, missing: Missing) -> bool:
    if missing == "anywhere":
        return True
    if missing == "first":
        return n_none == 1 and items[0] is None
    if missing == "all_or_none":
        return n_none == len(items)
    return False


def _slow(items: list[Any], where: str, error: ErrorFactory, missing: Missing) -> tuple[list[float | None], bytes]:
    """The per-entry check: raises naming the first bad entry (it runs only when a fast path gave no verdict)."""
    all_missing = items.count(None) == len(items)
    out: list[float | None] = []
    for i, value in enumerate(items):
        ok = missing == "anywhere" or (missing == "first" and i == 0) or (missing == "all_or_none" and all_missing)
        out.append(logprob_value(value, f"{where}[{i}]", error, missing_ok=ok))
    with np.errstate(over="ignore"):
        packed = np.array(out, dtype=np.float64).astype("<f4").tobytes()
    return out, packed


def logprob_array(value: Any, where: str, error: ErrorFactory, *, missing: Missing) -> NDArray[Any]:
    """Logprobs from packed little-endian float32 bytes or a number list (NaN = missing), as a checked array."""
    if isinstance(value, bytes):
        if len(value) % 4:
            raise error(f"{where}: {len(value)} bytes is not a whole number of 4-byte values")
        values: NDArray[Any] = np.frombuffer(value, dtype="<f4")
    elif isinstance(value, list | tuple) and (
        set(map(type, value)) <= {int, float}  # one C-level pass; subclasses take the exact check below
        or all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        try:
            values = np.array(value, dtype=np.float64)
        except OverflowError:
            raise error(f"{where}: logprob out of range") from None
    else:
        raise error(f"{where}: expected packed float32 bytes or a float array, got {type(value).__name__}")
    absent = np.isnan(values)
    present = values[~absent]
    if not (np.isfinite(present) if present.dtype == np.float32 else np.abs(present) < FLOAT32_OVERFLOW).all():
        raise error(f"{where}: a logprob is infinite or beyond float32's range")
    n_absent = int(absent.sum())
    if n_absent and missing != "anywhere":
        allowed = (missing == "first" and n_absent == 1 and bool(absent[0])) or (
            missing == "all_or_none" and n_absent == len(values)
        )
        if not allowed:
            raise error(f"{where}: logprob {int(np.flatnonzero(absent)[0])} is missing (NaN) where one is required")
    return values


def logprobs_presence(recorded: bool | None, given: bool, where: str, error: ErrorFactory) -> bool:
    """Whether a trajectory records logprobs, once a turn that carries them (``given``) or not is added; ``recorded``
    is what its turns so far did (None: no turn yet). Mixing is refused: a trainer reading a trajectory's logprobs
    gets all of its generated tokens' real values, or none and a clear absence, never holes."""
    if recorded is not None and recorded != given:
        have, lack = ("has", "lack") if given else ("lacks", "have")
        raise error(
            f"{where} {have} output logprobs and the trajectory's earlier turns {lack} them: a trajectory records "
            "logprobs for every turn or for none (keep return_logprob the same for the whole trajectory)"
        )
    return given


# -- the rest ---------------------------------------------------------------------------------------------------------


def finish_reason(value: Any, where: str, error: ErrorFactory) -> FinishReason:
    """A finish reason: one of :data:`FINISH_REASONS`."""
    if value not in FINISH_REASONS:
        shown = value[:64] if isinstance(value, str) else value
        raise error(f"{where}: unknown finish reason {shown!r} (one of {', '.join(FINISH_REASONS)})")
    return cast(FinishReason, value)


def routed_expert_rows(raw: bytes, prefix_length: int, new_tokens: int, where: str, error: ErrorFactory) -> None:
    """A turn's routing (raw int32 bytes) holds whole rows for each position it routes: every new token, except
    the very last of the first turn (the last token of a sequence has no routing)."""
    rows = new_tokens if prefix_length else new_tokens - 1
    if raw and rows > 0 and len(raw) % (4 * rows):
        raise error(f"{where} has {len(raw)} bytes, not whole int32 rows for {rows} positions")


def routing_layout(raw: bytes, rows: int, layout: tuple[int, int, int], where: str, error: ErrorFactory) -> None:
    """Int32 routing ``raw`` for ``rows`` positions, of a known ``(num_layers, top_k, num_experts)``."""
    num_layers, top_k, num_experts = layout
    if not (1 <= num_layers <= 4096 and 1 <= top_k <= num_experts <= MAX_TOKEN_ID):
        raise error(f"{where}: layout {layout} is not (1 <= layers <= 4096, 1 <= top_k <= experts)")
    if len(raw) != 4 * max(rows, 0) * num_layers * top_k:
        raise error(f"{where} has {len(raw)} bytes; {rows} rows of {num_layers}x{top_k} int32 are needed")
    values = np.frombuffer(raw, dtype="<i4")
    if values.size and (values.min() < 0 or values.max() >= num_experts):
        raise error(f"{where} holds an expert id outside [0, {num_experts})")


def top_p_sets(
    ids: Sequence[int], offsets: Sequence[int], outputs: int, where: str, error: ErrorFactory
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A turn's top-p sets: token ids, and ``outputs + 1`` offsets rising from 0 to the number of ids."""
    checked_ids, _ = token_ids(ids, f"{where} token ids", error)
    checked = list(offsets)
    if not is_token_id_list(checked):
        raise error(f"{where}: offsets must be non-negative integers")
    if len(checked) != outputs + 1 or checked[0] != 0 or checked[-1] != len(checked_ids):
        raise error(f"{where}: {len(checked)} offsets for {outputs} tokens and {len(checked_ids)} ids")
    if any(b < a for a, b in itertools.pairwise(checked)):
        raise error(f"{where}: offsets must not decrease")
    return tuple(checked_ids), tuple(checked)


class WeightVersionSpan(NamedTuple):
    """Output tokens ``[start, end)`` of a turn were sampled with weights ``version`` (SGLang's ``weight_versions``,
    vLLM's ``WeightVersionSpan``)."""

    version: str
    start: int
    end: int


def weight_version_spans(
    value: Any, output_length: int, where: str, error: ErrorFactory
) -> tuple[WeightVersionSpan, ...]:
    """Weight-version spans (objects or triples) covering a turn's ``output_length`` tokens: from 0, in order, each
    non-empty, adjacent, ending at ``output_length``. ``[]`` and None mean the server did not say."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list | tuple):
        raise error(f"{where}: expected a list of weight-version spans, got {type(value).__name__}")
    spans: list[WeightVersionSpan] = []
    position = 0
    for i, item in enumerate(value):
        if isinstance(item, dict):
            version, start, end = item.get("version"), item.get("start"), item.get("end")
        elif isinstance(item, list | tuple) and len(item) == 3:
            version, start, end = item
        else:
            raise error(f"{where}[{i}]: expected {{version, start, end}}, got {item!r:.100}")
        if version is None or isinstance(version, bool | dict | list):
            raise error(f"{where}[{i}]: version {version!r:.100} is not a string")
        empty_reply = output_length == 0 and start == end == 0 and len(value) == 1  # SGLang's span of no tokens
        if type(start) is not int or type(end) is not int or start != position or (end <= start and not empty_reply):
            raise error(f"{where}[{i}]: span [{start!r}, {end!r}) does not continue the spans at {position}")
        spans.append(WeightVersionSpan(str(version), start, end))
        position = end
    if position != output_length:
        raise error(f"{where}: spans cover {position} output tokens, the turn has {output_length}")
    return tuple(spans)


def weight_version_spans_json(spans: Sequence[WeightVersionSpan]) -> list[WeightVersionRun]:
    """Spans in the JSON form SGLang and vLLM send, and records and spans carry: ``[{version, start, end}]``."""
    return [{"version": s.version, "start": s.start, "end": s.end} for s in spans]


def parse_json_spans(raw: Any, output_length: int, where: str, error: ErrorFactory) -> tuple[WeightVersionSpan, ...]:
    """Weight-version spans from a JSON string (a span attribute)."""
    try:
        value = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        raise error(f"{where} is not JSON") from None
    return weight_version_spans(value, output_length, where, error)
