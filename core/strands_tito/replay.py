"""What a trainer replays besides the tokens: MoE routing (R3) and the top-p token sets (slime), checked and encoded.

A turn keeps its routing as SGLang gives it (base64 int32 rows, ``Turn.routed_experts``) with the model's layout
``(num_layers, top_k, num_experts)`` when known, and its top-p sets as ``(token_ids, offsets)`` over its output
tokens. Here are their checks, the whole-trajectory forms a trainer reads (:func:`routing_npy`, :func:`top_p_rows`)
and their span attributes. The span attributes are revision 2 of span schema 1 (``docs/span-schema.md``); a reader
of revision 1 ignores them and loses only what they add.

- ``tito.routed_experts.compact`` (bytes) with ``tito.routed_experts.layout`` (``[num_layers, top_k, num_experts]``):
  the turn's routing rows, as ``tito.routed_experts`` has them, in the smallest little-endian dtype that holds the
  expert ids (uint8 up to 256 experts, uint16 up to 65536, else int32): a quarter of the int32 size for most models.
- ``tito.top_p.token_ids`` and ``tito.top_p.offsets`` (packed int32 bytes, or int arrays in the ``array`` encoding):
  the ids the sampler kept at each output position, flattened, and ``output_length + 1`` row ends from 0.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from strands_tito import checks
from strands_tito.errors import StrandsTitoError

ROUTED_EXPERTS_COMPACT = "tito.routed_experts.compact"
ROUTED_EXPERTS_LAYOUT = "tito.routed_experts.layout"
TOP_P_IDS = "tito.top_p.token_ids"
TOP_P_OFFSETS = "tito.top_p.offsets"

__all__ = [
    "ReplayDataError",
    "decode_compact_routing",
    "decode_routed_experts",
    "decode_top_p",
    "npy_rows",
    "replay_attributes",
    "routed_experts_dtype",
    "routing_npy",
    "top_p_rows",
]


class ReplayDataError(StrandsTitoError, ValueError):
    """Routing or top-p data that is missing a part, mistyped or inconsistent with its turn."""


class _TurnReplay(Protocol):
    """What these functions read of a ``Turn``."""

    @property
    def prompt_length(self) -> int: ...
    @property
    def routed_experts(self) -> str | None: ...
    @property
    def routed_experts_layout(self) -> tuple[int, int, int] | None: ...
    @property
    def top_p_token_ids(self) -> tuple[int, ...] | None: ...
    @property
    def top_p_offsets(self) -> tuple[int, ...] | None: ...


def routed_experts_dtype(num_experts: int) -> str:
    """The smallest little-endian dtype that holds expert ids below ``num_experts``: uint8, uint16 or int32."""
    if num_experts <= 2**8:
        return "u1"
    if num_experts <= 2**16:
        return "<u2"
    return "<i4"


def routing_npy(turns: Sequence[_TurnReplay]) -> str | None:
    """Every turn's routing joined into base64 of a ``.npy`` of shape ``(len - 1, num_layers, top_k)`` in
    :func:`routed_experts_dtype` (the form vLLM returns and Agent Lightning's trainer reads); None unless every turn
    has routing of one known layout."""
    layouts = {t.routed_experts_layout for t in turns}
    layout = layouts.pop() if len(layouts) == 1 else None
    if layout is None or any(t.routed_experts is None for t in turns):
        return None
    num_layers, top_k, num_experts = layout
    values = np.frombuffer(b"".join(base64.b64decode(t.routed_experts or "") for t in turns), dtype="<i4")
    buffer = io.BytesIO()
    np.save(buffer, values.reshape(-1, num_layers, top_k).astype(routed_experts_dtype(num_experts)))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def top_p_rows(turns: Sequence[_TurnReplay]) -> tuple[list[int], list[int]] | None:
    """The top-p sets of a whole trajectory, one row per token (prompt tokens' rows empty): ``(token_ids, offsets)``
    with one more offset than tokens; None unless every turn recorded its sets."""
    if not turns or any(t.top_p_offsets is None for t in turns):
        return None
    ids: list[int] = []
    offsets = [0]
    for turn in turns:
        offsets.extend([len(ids)] * turn.prompt_length)
        base = len(ids)
        ids.extend(turn.top_p_token_ids or ())
        offsets.extend(base + end for end in (turn.top_p_offsets or (0,))[1:])
    return ids, offsets


def replay_attributes(
    routed_experts: bytes | None,
    layout: tuple[int, int, int] | None,
    top_p: tuple[Sequence[int], Sequence[int]] | None,
    *,
    packed: bool,
) -> dict[str, Any]:
    """The compact routing (int32 rows ``routed_experts`` of a known ``layout``) and top-p attributes of a turn."""
    attributes: dict[str, Any] = {}
    if routed_experts is not None and layout is not None:
        dtype = routed_experts_dtype(layout[2])
        attributes[ROUTED_EXPERTS_COMPACT] = np.frombuffer(routed_experts, dtype="<i4").astype(dtype).tobytes()
        attributes[ROUTED_EXPERTS_LAYOUT] = list(layout)
    if top_p is not None:
        ids, offsets = top_p
        attributes[TOP_P_IDS] = np.asarray(ids, dtype="<i4").tobytes() if packed else list(ids)
        attributes[TOP_P_OFFSETS] = np.asarray(offsets, dtype="<i4").tobytes() if packed else list(offsets)
    return attributes


def decode_compact_routing(attributes: Mapping[str, Any], rows: int) -> tuple[bytes, tuple[int, int, int]] | None:
    """The compact routing of a turn routing ``rows`` positions, as int32 rows (what a trajectory keeps) and layout."""
    if ROUTED_EXPERTS_COMPACT not in attributes:
        return None
    raw = attributes[ROUTED_EXPERTS_COMPACT]
    layout = attributes.get(ROUTED_EXPERTS_LAYOUT)
    if not isinstance(raw, bytes):
        raise ReplayDataError(f"{ROUTED_EXPERTS_COMPACT} must be bytes")
    if not (isinstance(layout, list | tuple) and len(layout) == 3 and all(type(v) is int for v in layout)):
        raise ReplayDataError(f"{ROUTED_EXPERTS_LAYOUT} must be [num_layers, top_k, num_experts]")
    dtype = np.dtype(routed_experts_dtype(max(layout[2], 1)))
    if len(raw) % dtype.itemsize:
        raise ReplayDataError(f"{ROUTED_EXPERTS_COMPACT} is not whole {dtype.name} values")
    int32_rows = np.frombuffer(raw, dtype=dtype).astype("<i4").tobytes()
    checks.routing_layout(int32_rows, rows, tuple(layout), ROUTED_EXPERTS_COMPACT, ReplayDataError)
    return int32_rows, (layout[0], layout[1], layout[2])


def _int32_array(value: Any, key: str) -> Any:
    if isinstance(value, bytes) and len(value) % 4 == 0:
        return np.frombuffer(value, dtype="<i4")
    if isinstance(value, list | tuple) and checks.is_token_id_list(list(value)):
        return np.array(value, dtype=np.int64)
    raise ReplayDataError(f"{key} must be packed int32 bytes or an array of non-negative ints")


def decode_top_p(attributes: Mapping[str, Any], outputs: int) -> tuple[list[int], list[int]] | None:
    """A turn's top-p sets ``(token_ids, offsets)``: both attributes or neither (rules: :func:`checks.top_p_sets`)."""
    if TOP_P_IDS not in attributes and TOP_P_OFFSETS not in attributes:
        return None
    if TOP_P_IDS not in attributes or TOP_P_OFFSETS not in attributes:
        raise ReplayDataError(f"{TOP_P_IDS} and {TOP_P_OFFSETS} go together")
    ids = _int32_array(attributes[TOP_P_IDS], TOP_P_IDS).tolist()
    offsets = _int32_array(attributes[TOP_P_OFFSETS], TOP_P_OFFSETS).tolist()
    checked_ids, checked_offsets = checks.top_p_sets(ids, offsets, outputs, "tito.top_p", ReplayDataError)
    return list(checked_ids), list(checked_offsets)


def decode_routed_experts(
    routed_experts: str | Sequence[str],
    seq_len: int | None = None,
    num_layers: int | None = None,
    top_k: int | None = None,
) -> NDArray[np.int32]:
    """Join base64 little-endian int32 routing into an array of shape ``(seq_len - 1, num_layers, top_k)``.

    Args:
        routed_experts: One base64 string, or per-turn slices in order (``model.routed_experts``).
        seq_len: Tokens in the trajectory (routing covers every position but the last); None takes the row count
            from the data.
        num_layers: MoE layers.
        top_k: Experts per token.

    Raises:
        ValueError: The data do not split into ``num_layers x top_k`` rows, or hold a different number of rows
            than ``seq_len - 1``.
    """
    if num_layers is None or top_k is None:
        raise TypeError("decode_routed_experts needs num_layers= and top_k=")
    slices = [routed_experts] if isinstance(routed_experts, str) else list(routed_experts)
    buffer = b"".join(base64.b64decode(s) for s in slices)
    row = 4 * num_layers * top_k
    if len(buffer) % row:
        raise ValueError(f"{len(buffer)} bytes of routing do not split into rows of {num_layers}x{top_k} int32")
    rows = len(buffer) // row
    if seq_len is not None and rows != max(seq_len - 1, 0):
        raise ValueError(
            f"routing holds {rows} rows of {num_layers}x{top_k}, but seq_len={seq_len} needs {max(seq_len - 1, 0)} "
            "(one per position but the last): seq_len, num_layers or top_k does not match the data"
        )
    return np.frombuffer(buffer, dtype="<i4").astype(np.int32).reshape(rows, num_layers, top_k)


def npy_rows(
    choice: Mapping[str, Any], wanted: bool, tokens: int, recorded: int, error: type[Exception]
) -> tuple[str | None, tuple[int, int, int] | None]:
    """A turn's routing from vLLM's ``choice["routed_experts"]`` (base64 ``.npy``, ``(tokens - 1, layers, top_k)`` over
    the whole sequence), when ``wanted``: its rows from ``recorded - 1`` on as base64 int32 (the form a trajectory
    keeps), and the layout (the array's, the expert count bounded by its dtype); ``(None, None)`` when not wanted.
    Anything else raises ``error``."""
    if not wanted:
        return None, None
    value = choice.get("routed_experts")
    if not isinstance(value, str):
        raise error(
            "routed experts were requested but the reply has none (start vLLM with --enable-return-routed-experts)"
        )
    try:
        array = np.load(io.BytesIO(base64.b64decode(value, validate=True)), allow_pickle=False)
    except ValueError as e:
        raise error(f"routed_experts is not a base64 .npy: {e}") from None
    if array.ndim != 3 or array.shape[0] != tokens - 1 or array.dtype.kind not in "ui":
        raise error(f"routed_experts has shape {array.shape} ({array.dtype}); {tokens - 1} rows needed")
    bound = 2 ** (8 * array.dtype.itemsize) if array.dtype.kind == "u" else checks.MAX_INT32
    rows = array[max(0, recorded - 1) :].astype("<i4")
    layout = (int(array.shape[1]), int(array.shape[2]), min(bound, checks.MAX_INT32))
    return base64.b64encode(rows.tobytes()).decode("ascii"), layout
