"""The trajectory: the exact token sequence a policy saw and produced, and the one place its invariants live.

Every producer (the model providers, the span assembler) builds a :class:`Trajectory` through
:meth:`Trajectory.append_turn`, which validates a whole turn before changing anything, so a turn that fails
leaves no partial segment behind.
"""

from __future__ import annotations

import base64
import copy
import re
import sys
import uuid
import zlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import orjson
from numpy.typing import NDArray

from strands_tito import checks
from strands_tito.checks import FinishReason as FinishReason  # the trajectory's name for it since 0.1
from strands_tito.checks import WeightVersionSpan
from strands_tito.errors import StrandsTitoError
from strands_tito.prompt_ids import PromptIds
from strands_tito.records import TokenFields, TurnEntry
from strands_tito.replay import decode_routed_experts, routing_npy, top_p_rows

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

    from strands_tito.trajectory_fields import TrajectoryFields

#: What an image of a trajectory must look like: a base64 data URL of an image type (what SGLang's ``image_data``
#: takes and what a trainer decodes without fetching anything).
_DATA_URL = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,[A-Za-z0-9+/]+={0,2}")


class TrajectoryError(StrandsTitoError, ValueError):
    """A turn would break the trajectory's invariants; the trajectory is left unchanged."""


@dataclass(frozen=True, slots=True)
class Segment:
    """A run of tokens that are all prompt (``is_output=False``) or all model output.

    ``len(segment)`` is its token count, so ``len(trajectory.segments[0])`` is the initial prompt length.
    """

    is_output: bool
    start: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True)
class Turn:
    """What one model call added: new prompt tokens, then the output, plus what the server said about it."""

    index: int
    prompt_start: int
    prompt_length: int
    output_length: int
    finish_reason: FinishReason
    prefix_crc32: int = 0
    matched_stop: int | str | None = None
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    latency_s: float | None = None
    request_id: str | None = None
    weight_version: str | None = None
    routed_experts: str | None = None
    routed_experts_layout: tuple[int, int, int] | None = None  # (num_layers, top_k, num_experts), when known
    # Top-p replay: output token i kept top_p_token_ids[top_p_offsets[i]:top_p_offsets[i + 1]] (None: not recorded).
    top_p_token_ids: tuple[int, ...] | None = None
    top_p_offsets: tuple[int, ...] | None = None
    image_data: tuple[str, ...] = ()
    """Data URLs of the images this turn's new prompt tokens hold, in prompt order (one placeholder token each)."""
    weight_versions: tuple[WeightVersionSpan, ...] = ()
    """Which weights sampled which output tokens: ``(version, start, end)`` runs over ``[0, output_length)`` (empty:
    the server did not say). ``weight_version`` is the last run's version."""

    @property
    def output_start(self) -> int:
        """Position of the first output token in the trajectory."""
        return self.prompt_start + self.prompt_length

    def as_dict(self) -> TurnEntry:
        """Plain-JSON form (routing and top-p sets left out: the record has them for the whole trajectory)."""
        return {
            "index": self.index,
            "prompt_start": self.prompt_start,
            "prompt_length": self.prompt_length,
            "output_length": self.output_length,
            "finish_reason": self.finish_reason,
            # A stop token id or a stop string; one type in files, so columnar readers get one schema.
            "matched_stop": None if self.matched_stop is None else str(self.matched_stop),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "latency_s": self.latency_s,
            "request_id": self.request_id,
            "weight_version": self.weight_version,
            "weight_versions": checks.weight_version_spans_json(self.weight_versions),
            # How many of the trajectory's images this turn's new prompt added (the record's image_data holds them).
            "images": len(self.image_data),
        }


def _check_logprobs(
    name: str, logprobs: Sequence[float | None] | None, expected: int, missing: checks.Missing
) -> tuple[list[float | None], bytes]:
    """Validated logprobs (:func:`strands_tito.checks.logprobs`), and the same as little-endian float32 bytes (None
    given: all missing, which only prompt tokens may be)."""
    if logprobs is None:
        return [None] * expected, np.full(expected, np.nan, dtype="<f4").tobytes()
    if len(logprobs) != expected:
        raise TrajectoryError(f"{name}: {len(logprobs)} logprobs for {expected} tokens")
    return checks.logprobs(logprobs, name, TrajectoryError, missing=missing)


def _check_weight_versions(
    spans: Sequence[WeightVersionSpan | Mapping[str, Any]], version: str | None, output_length: int
) -> tuple[tuple[WeightVersionSpan, ...], str | None]:
    """A turn's weight-version runs (:func:`strands_tito.checks.weight_version_spans`) and its version, the last
    run's (SGLang overwrites ``weight_version`` with it, ``weight_versions.py:107``)."""
    runs = checks.weight_version_spans(list(spans), output_length, "weight_versions", TrajectoryError)
    if not runs:
        return runs, version
    if version is not None and version != runs[-1].version:
        raise TrajectoryError(f"weight_version {version!r} is not the last weight_versions span's {runs[-1].version!r}")
    return runs, runs[-1].version


class _CheckedTurn(NamedTuple):
    """A turn :meth:`Trajectory.append_turn` has validated but not yet appended (the ids and logprobs also packed)."""

    prompt: list[int]
    prompt_packed: bytes
    output: list[int]
    output_packed: bytes
    prompt_logprobs: list[float | None] | None  # None (both): the turn carries no logprobs
    prompt_logprobs_packed: bytes
    output_logprobs: list[float | None] | None
    output_logprobs_packed: bytes
    finish_reason: FinishReason
    routed_experts: str | None
    images: tuple[str, ...]
    top_p: tuple[tuple[int, ...], tuple[int, ...]] | None
    routed_experts_layout: tuple[int, int, int] | None


@dataclass
class Trajectory:
    """Token IDs with loss mask, logprobs, segments and per-turn records.

    Invariants (checked in :meth:`append_turn`, the only mutator): ``token_ids``, ``loss_mask`` and ``logprobs``
    have equal lengths; the first segment is a prompt; segments tile ``token_ids`` exactly; ``loss_mask`` is 1
    exactly on output tokens; each turn's routed-experts slice (if any) covers its positions; ``logprobs`` is None
    exactly when the turns carry no logprobs (asked for with ``return_logprob`` off), and otherwise holds a real
    value at every output token (None only at prompt tokens): :func:`strands_tito.checks.logprobs_presence`.
    """

    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] | None = field(default_factory=list)
    """Per token; None: this trajectory records no logprobs at all (never a list with holes at output tokens)."""
    segments: list[Segment] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    trajectory_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    crc32: int = 0
    """CRC-32 of ``token_ids`` as little-endian int32, kept as turns are added (spans carry it to detect gaps)."""
    packed_ids: bytearray = field(default_factory=bytearray, repr=False, compare=False)
    """``token_ids`` as little-endian int32 bytes, grown with each turn (what spans carry, at memcpy cost)."""
    packed_logprobs: bytearray = field(default_factory=bytearray, repr=False, compare=False)
    """``logprobs`` as little-endian float32 bytes, NaN where None (empty when ``logprobs`` is None)."""
    ids_json: bytearray = field(default_factory=bytearray, repr=False, compare=False)
    """``token_ids`` as the inside of a JSON array (``1,2,3``), grown with each turn: every request resends the
    whole trajectory, and this way only the new tokens are serialized."""

    images: list[str] = field(default_factory=list, repr=False)
    """Every turn's images in prompt order (:attr:`image_data`); grown only by :meth:`append_turn`."""

    def __post_init__(self) -> None:
        # Lists given to the constructor (strands-sglang 0.6's ``Rollout(token_ids=...)``) would skip every check.
        n = len(self.token_ids)
        logprobs = n if self.logprobs is None else len(self.logprobs)
        if len(self.loss_mask) != n or logprobs != n or len(self.packed_ids) != 4 * n:
            raise TrajectoryError(
                "a Trajectory grows through append_turn / add_prompt / add_response; "
                "Trajectory.model_validate(fields) builds one from its fields"
            )

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_mask(self) -> list[bool]:
        """True where the token was generated by the model."""
        return [bool(m) for m in self.loss_mask]

    @property
    def segment_info(self) -> list[tuple[bool, int]]:
        """Segments as ``(is_output, length)`` pairs."""
        return [(s.is_output, s.length) for s in self.segments]

    @property
    def initial_prompt_length(self) -> int:
        """Length of the first prompt segment (system, tools and first user message)."""
        return self.segments[0].length if self.segments else 0

    @property
    def routed_experts(self) -> list[str]:
        """Per-turn base64 routed-expert slices, in order (turns without one are skipped)."""
        return [t.routed_experts for t in self.turns if t.routed_experts is not None]

    @property
    def weight_versions(self) -> list[WeightVersionSpan]:
        """Which weights sampled which generated tokens, as ``(version, start, end)`` runs of trajectory positions
        (turns whose server did not say are left out): for asynchronous RL, where weights change mid-rollout."""
        runs: list[WeightVersionSpan] = []
        for turn in self.turns:
            offset = turn.output_start
            runs.extend(WeightVersionSpan(s.version, s.start + offset, s.end + offset) for s in turn.weight_versions)
        return runs

    @property
    def image_data(self) -> list[str]:
        """The images of the trajectory's prompts as base64 data URLs, in prompt order (strands-sglang 0.6's
        ``Rollout.image_data``): what SGLang received as ``image_data`` with the last turn's ``input_ids``, where each
        image is one placeholder token. ``turns[k].image_data`` are the ones turn ``k`` added."""
        return self.images

    def append_turn(  # noqa: PLR0913  one keyword per field of a turn
        self,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        *,
        finish_reason: FinishReason,
        prompt_logprobs: Sequence[float | None] | None = None,
        output_logprobs: Sequence[float | None] | None = None,
        matched_stop: int | str | None = None,
        prompt_tokens: int | None = None,
        cached_tokens: int | None = None,
        latency_s: float | None = None,
        request_id: str | None = None,
        weight_version: str | None = None,
        routed_experts: str | None = None,
        routed_experts_layout: tuple[int, int, int] | None = None,
        top_p: tuple[Sequence[int], Sequence[int]] | None = None,
        image_data: Sequence[str] = (),
        image_token_id: int | None = None,
        weight_versions: Sequence[WeightVersionSpan | Mapping[str, Any]] = (),
    ) -> Turn:
        """Validate one turn completely, then append it; on any error nothing changes.

        Args:
            prompt_ids: Tokens added to the context before this call (the whole prompt on the first turn).
            output_ids: Tokens the model generated, stop token included.
            finish_reason: ``stop`` or ``length``; ``abort`` is accepted for records assembled from spans.
            prompt_logprobs: Server logprobs of ``prompt_ids`` (None entries where unknown).
            output_logprobs: Server logprobs of ``output_ids``, each real; None: no logprobs (as every other turn).
            matched_stop: The stop token id or string the server matched.
            prompt_tokens: The server's count of the whole prompt; must equal the new trajectory prefix length.
            cached_tokens: Prompt tokens served from the server's prefix cache (None: the server did not say).
            latency_s: Server-side latency.
            request_id: Server request id.
            weight_version: Policy weight version reported by the server.
            routed_experts: Base64 int32 routing slice for positions ``[len(self) - 1, len(self) + new - 1)``
                (all positions but the last for the first turn).
            routed_experts_layout: ``(num_layers, top_k, num_experts)`` of that routing, when known.
            top_p: ``(token_ids, offsets)`` the top-p sampler kept per output token (``len(output_ids) + 1`` offsets).
            image_data: Base64 image data URLs of the images ``prompt_ids`` holds, in prompt order.
            image_token_id: The image placeholder token; when given, ``prompt_ids`` must hold exactly one per image.
            weight_versions: Which weights sampled which output tokens (SGLang's ``weight_versions``, vLLM's
                ``WeightVersionSpan`` list): runs covering ``output_ids``; ``weight_version`` defaults to the last
                run's version and must equal it.
        """
        spans, weight_version = _check_weight_versions(weight_versions, weight_version, len(output_ids))
        new = self._check_turn(
            prompt_ids,
            output_ids,
            finish_reason,
            prompt_logprobs,
            output_logprobs,
            prompt_tokens,
            routed_experts,
            image_data,
            image_token_id,
            routed_experts_layout,
            top_p,
        )
        return self._commit_turn(new, matched_stop, cached_tokens, latency_s, request_id, weight_version, spans)

    def _check_turn(  # noqa: PLR0917  append_turn's arguments handed on in its order
        self,
        prompt_ids: Sequence[int],
        output_ids: Sequence[int],
        finish_reason: FinishReason,
        prompt_logprobs: Sequence[float | None] | None,
        output_logprobs: Sequence[float | None] | None,
        prompt_tokens: int | None,
        routed_experts: str | None,
        image_data: Sequence[str],
        image_token_id: int | None,
        routed_experts_layout: tuple[int, int, int] | None = None,
        top_p: tuple[Sequence[int], Sequence[int]] | None = None,
    ) -> _CheckedTurn:
        """The validation half of :meth:`append_turn`: checks everything and changes nothing."""
        prompt, prompt_packed = checks.token_ids(prompt_ids, "prompt_ids", TrajectoryError)
        output, output_packed = checks.token_ids(output_ids, "output_ids", TrajectoryError)
        if not self.segments and not prompt:
            raise TrajectoryError("the first turn must start with a non-empty prompt")
        if not output:
            raise TrajectoryError("the model produced no tokens; nothing to record")
        p_logprobs, p_packed, o_logprobs, o_packed = self._check_turn_logprobs(
            prompt_logprobs, len(prompt), output_logprobs, len(output)
        )
        checks.finish_reason(finish_reason, "finish_reason", TrajectoryError)
        start = len(self.token_ids)
        if prompt_tokens is not None and prompt_tokens != start + len(prompt):
            raise TrajectoryError(
                f"server saw a {prompt_tokens}-token prompt but the trajectory prefix is {start + len(prompt)} tokens"
            )
        if routed_experts is not None:
            turn_start = self._turn_start()
            self._check_routed_experts(
                routed_experts, turn_start, start - turn_start + len(prompt) + len(output), routed_experts_layout
            )
        checked_top_p = None if top_p is None else checks.top_p_sets(*top_p, len(output), "top_p", TrajectoryError)
        images = tuple(image_data)
        for i, url in enumerate(images):
            if not isinstance(url, str) or not _DATA_URL.fullmatch(url):
                raise TrajectoryError(f"image_data[{i}] is not a base64 image data URL")
        if image_token_id is not None and (found := prompt.count(image_token_id)) != len(images):
            raise TrajectoryError(f"prompt_ids hold {found} image placeholders for {len(images)} images")
        return _CheckedTurn(
            prompt,
            prompt_packed,
            output,
            output_packed,
            p_logprobs,
            p_packed,
            o_logprobs,
            o_packed,
            finish_reason,
            routed_experts,
            images,
            checked_top_p,
            routed_experts_layout if routed_experts is not None else None,
        )

    def _check_turn_logprobs(
        self, prompt: Sequence[float | None] | None, prompt_length: int, output: Sequence[float | None] | None,
        output_length: int,
    ) -> tuple[list[float | None] | None, bytes, list[float | None] | None, bytes]:  # fmt: skip
        """A turn's prompt and output logprobs, checked and packed; both None (and no bytes) for a turn without."""
        if self.expect_logprobs(output is not None, f"turn {len(self.turns)}"):
            checked_prompt = _check_logprobs("prompt_logprobs", prompt, prompt_length, "anywhere")
            # A generated token's logprob is never missing (it would be training data).
            return *checked_prompt, *_check_logprobs("output_logprobs", output, output_length, "never")
        if prompt is not None and any(v is not None for v in prompt):
            raise TrajectoryError("prompt_logprobs given for a turn without output logprobs")
        return None, b"", None, b""

    def _commit_turn(  # noqa: PLR0917  append_turn's checked arguments handed on in its order
        self,
        new: _CheckedTurn,
        matched_stop: int | str | None,
        cached_tokens: int | None,
        latency_s: float | None,
        request_id: str | None,
        weight_version: str | None,
        weight_versions: tuple[WeightVersionSpan, ...],
    ) -> Turn:
        """The commit half of :meth:`append_turn`, on a turn :meth:`_check_turn` accepted: nothing here can fail."""
        start = len(self.token_ids)
        turn_start = self._turn_start()  # before ``start`` when prompt tokens were added by hand (add_prompt)
        prefix_crc32 = self.crc32 if turn_start == start else zlib.crc32(memoryview(self.packed_ids)[: 4 * turn_start])
        turn = Turn(
            index=len(self.turns),
            prompt_start=turn_start,
            prompt_length=start - turn_start + len(new.prompt),
            output_length=len(new.output),
            finish_reason=new.finish_reason,
            prefix_crc32=prefix_crc32,
            matched_stop=matched_stop,
            prompt_tokens=start + len(new.prompt),
            cached_tokens=cached_tokens,
            latency_s=latency_s,
            request_id=request_id,
            weight_version=weight_version,
            routed_experts=new.routed_experts,
            routed_experts_layout=new.routed_experts_layout,
            top_p_token_ids=None if new.top_p is None else new.top_p[0],
            top_p_offsets=None if new.top_p is None else new.top_p[1],
            image_data=new.images,
            weight_versions=weight_versions,
        )
        # Commit: nothing below can fail.
        self._extend(new.prompt, new.prompt_packed, new.prompt_logprobs, new.prompt_logprobs_packed, False)
        self._extend(new.output, new.output_packed, new.output_logprobs, new.output_logprobs_packed, True)
        self.turns.append(turn)
        self.images.extend(new.images)
        return turn

    def _extend(self, ids: list[int], packed: bytes, logprobs: list[float | None] | None, logprobs_packed: bytes, /,
                is_output: bool) -> None:  # fmt: skip
        """Append checked tokens of one kind (one segment per run of a kind); ``logprobs`` None: the trajectory records
        none from now on (checked by :meth:`expect_logprobs`). Cannot fail."""
        if logprobs is None:
            self.logprobs = None
            self.packed_logprobs.clear()
        if not ids:
            return
        start = len(self.token_ids)
        self.crc32 = zlib.crc32(packed, self.crc32)
        self.packed_ids += packed
        self.ids_json += (b"," if self.ids_json else b"") + orjson.dumps(ids)[1:-1]
        self.token_ids.extend(ids)
        self.loss_mask.extend([int(is_output)] * len(ids))
        if self.logprobs is not None and logprobs is not None:
            self.packed_logprobs += logprobs_packed
            self.logprobs.extend(logprobs)
        if self.segments and self.segments[-1].is_output == is_output:
            last = self.segments[-1]
            self.segments[-1] = Segment(is_output, last.start, last.length + len(ids))
        else:
            self.segments.append(Segment(is_output, start, len(ids)))

    def expect_logprobs(self, given: bool, where: str = "the next turn") -> bool:
        """Check that a turn with (``given``) or without output logprobs may be added: every turn of a trajectory
        carries them or none does (:func:`strands_tito.checks.logprobs_presence`); a provider calls it before
        sending a request. Returns ``given``.

        Raises:
            TrajectoryError: The turn would mix, or it has none while prompt tokens added by hand have real ones.
        """
        recorded = False if self.logprobs is None else (True if self.turns else None)
        checks.logprobs_presence(recorded, given, where, TrajectoryError)
        if not given and self.logprobs and any(v is not None for v in self.logprobs):
            raise TrajectoryError(f"{where} lacks output logprobs, but prompt tokens were added with real ones")
        return given

    def _turn_start(self) -> int:
        """Where the next turn's prompt starts: right after the last turn's output."""
        return self.turns[-1].output_start + self.turns[-1].output_length if self.turns else 0

    # -- hand-built trajectories (strands-sglang 0.6's Rollout methods), checked like the model's own turns ---------

    def add_prompt(self, token_ids: Sequence[int], logprobs: Sequence[float | None] | None = None) -> None:
        """Append prompt tokens (loss mask 0), checked as :meth:`append_turn` checks a prompt; they begin the next
        turn's prompt. Empty ``token_ids`` add nothing.

        Raises:
            TrajectoryError: The ids or logprobs are invalid; nothing is added.
        """
        ids, ids_packed = checks.token_ids(token_ids, "token_ids", TrajectoryError)
        checked, packed = _check_logprobs("logprobs", logprobs, len(ids), "anywhere")
        if self.logprobs is None and any(v is not None for v in checked):
            raise TrajectoryError("logprobs given to a trajectory that records none (its turns carry no logprobs)")
        self._extend(ids, ids_packed, checked, packed, False)

    def add_response(self, token_ids: Sequence[int], logprobs: Sequence[float | None] | None = None) -> None:
        """Append model output (loss mask 1) as a turn through :meth:`append_turn` (finish reason ``stop``), its prompt
        what :meth:`add_prompt` added since the last turn. Empty ``token_ids`` add nothing.

        Raises:
            TrajectoryError: Nothing was added before it (the first segment must be a prompt), or the ids or
                logprobs are invalid; nothing is added.
        """
        if len(token_ids) == 0:
            return
        if not self.segments:
            raise TrajectoryError("the first segment must be a prompt: call add_prompt() before add_response()")
        self.append_turn((), token_ids, finish_reason="stop", output_logprobs=logprobs)

    def add_routed_experts(self, routed_experts: str) -> None:
        """Attach the last turn's base64 routed-experts slice, checked as :meth:`append_turn` checks one.

        Raises:
            TrajectoryError: There is no turn yet, the last one has its slice already, or the slice does not fit it.
        """
        if not self.turns:
            raise TrajectoryError("routed experts belong to a turn: call add_response() first")
        last = self.turns[-1]
        if last.routed_experts is not None:
            raise TrajectoryError(f"turn {last.index} has its routed experts already")
        if not isinstance(routed_experts, str):
            raise TrajectoryError("routed_experts must be a base64 string")
        self._check_routed_experts(routed_experts, last.prompt_start, last.prompt_length + last.output_length)
        self.turns[-1] = replace(last, routed_experts=routed_experts)

    def _check_routed_experts(
        self, encoded: str, start: int, new_tokens: int, layout: tuple[int, int, int] | None = None
    ) -> None:
        try:
            raw = base64.b64decode(encoded, validate=True)
        except ValueError as e:
            raise TrajectoryError(f"routed_experts is not valid base64: {e}") from e
        if layout is not None:
            checks.routing_layout(
                raw, new_tokens if start else new_tokens - 1, layout, "routed_experts", TrajectoryError
            )
            return
        checks.routed_expert_rows(raw, start, new_tokens, "routed_experts", TrajectoryError)

    def prompt_ids(self, new_ids: list[int]) -> PromptIds:
        """The next request's whole prompt: ``token_ids`` followed by ``new_ids``, ``token_ids`` not copied."""
        return PromptIds(self.token_ids, new_ids)

    def input_ids_json(self, new_ids: Sequence[int]) -> bytes:
        """JSON array text of ``token_ids`` followed by ``new_ids`` (a request body's ``input_ids``)."""
        new = orjson.dumps(list(new_ids))[1:-1]
        return b"[" + self.ids_json + (b"," if self.ids_json and new else b"") + new + b"]"

    def decode_routed_experts(self, num_layers: int, top_k: int) -> NDArray[np.int32]:
        """All turns' routing as one ``int32`` array of shape ``(len(self) - 1, num_layers, top_k)``."""
        return decode_routed_experts(self.routed_experts, num_layers=num_layers, top_k=top_k)

    def to_dict(self) -> TokenFields:
        """Plain-JSON form of the trajectory (the token fields of a record)."""
        return {
            "trajectory_id": self.trajectory_id,
            "token_ids": list(self.token_ids),
            "loss_mask": list(self.loss_mask),
            "logprobs": None if self.logprobs is None else list(self.logprobs),  # None: not recorded at all
            # (is_output as 0/1, length): plain ints, so columnar readers (pyarrow, pandas, datasets) infer one type.
            "segments": [[int(s.is_output), s.length] for s in self.segments],
            "turns": [t.as_dict() for t in self.turns],
            # The images of all prompts in order (turns[k]["images"] of them per turn), as base64 data URLs.
            "image_data": list(self.images),
            # Every turn's routing as one base64 .npy (len - 1, layers, top_k); None without a known layout.
            "routed_experts": routing_npy(self.turns),
            # Top-p replay over the whole sequence (prompt tokens' rows empty); None unless every turn has it.
            "top_p": None if (rows := top_p_rows(self.turns)) is None else {"token_ids": rows[0], "offsets": rows[1]},
        }

    # -- pydantic: a field type, with BaseModel's methods (strands-sglang 0.6's Rollout was a BaseModel) ----------

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Validate a :class:`Trajectory` (kept as is) or its fields; serialize to its fields."""
        from strands_tito.trajectory_fields import pydantic_schema

        return pydantic_schema(cls, handler)

    def model_dump(self, *, mode: Literal["python", "json"] | str = "python") -> TrajectoryFields:
        """The trajectory as plain data (:class:`~strands_tito.trajectory_fields.TrajectoryFields`, fresh lists);
        ``mode="json"``: what JSON holds (``segment_info`` pairs as lists, as pydantic writes tuples)."""
        from strands_tito.trajectory_fields import fields_of

        return fields_of(self, json=mode == "json")

    def model_dump_json(self, *, indent: int | None = None) -> str:
        """:meth:`model_dump` (``mode="json"``) as JSON text (``indent`` given: two spaces)."""
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_INDENT_2 if indent else 0).decode()

    @classmethod
    def model_validate(cls, obj: Any) -> Trajectory:
        """``obj`` if it is a :class:`Trajectory`, else one rebuilt from its fields (:meth:`model_dump`'s or
        strands-sglang 0.6's) through :meth:`append_turn` and :meth:`add_prompt`: :class:`TrajectoryError` if invalid.
        """
        from strands_tito.trajectory_fields import trajectory_from_fields

        return obj if isinstance(obj, cls) else trajectory_from_fields(cls(), obj)

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray) -> Trajectory:
        """:meth:`model_validate` of JSON text (not JSON: :class:`orjson.JSONDecodeError`, a ``ValueError``)."""
        return cls.model_validate(orjson.loads(data))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Trajectory:
        """An independent copy (no list is shared, whatever ``deep``); with ``update``, one rebuilt from
        :meth:`model_dump` with those fields replaced, checked as :meth:`model_validate` checks."""
        if update:
            return type(self).model_validate({**self.model_dump(), **update})
        return replace(self, **{f.name: copy.copy(getattr(self, f.name)) for f in fields(self)})


def pack_int32(ids: Sequence[int]) -> bytes:
    """Token IDs as little-endian int32 bytes (the form spans carry and checksums cover)."""
    packed = array("i", ids)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


#: strands-sglang 0.6's name for the trajectory type: the same class.
Rollout = Trajectory
