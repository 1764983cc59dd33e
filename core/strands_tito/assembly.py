"""Reassembling trajectories from decoded spans: the one assembler for the embedded path and the collector.

Spans may arrive in any order, more than once (OTLP is at-least-once), interleaved across trajectories, batches,
connections and traces. The assembler keeps each trajectory's turns until its end signal (or an idle timeout), then
checks that the turns chain up exactly — every index present once, each turn's prefix length and CRC-32 equal to what
the earlier turns add up to, the end signal's totals matching — and builds the :class:`Trajectory` through its own
invariant checks. Anything that does not add up gives an *incomplete* record with the reason; nothing is merged or
dropped silently.

Call trajectories (a stock OpenAI-compatible provider, one ``call`` span per chat completion, each with its whole
prompt) are checked the same way for data loss -- every call present once, the end signal's count, token total and
CRC-32 matching -- and then *measured*: for each consecutive pair, whether call k's prompt starts with call k-1's
prompt + output (a text agent's server re-renders the history, so it may not). The record keeps every call exactly
and merges them into one :class:`Trajectory` as far as that prefix holds (``prefix_consistent`` says whether it held
throughout). Drift is not data loss: a record with drift is still complete.
"""

from __future__ import annotations

import base64
import logging
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from strands_tito.records import ExportedRecord, PrefixCheckEntry
from strands_tito.span_lineage import Lineage
from strands_tito.spans import CallSpan, Decoded, EndSpan, RewardSpan, SpanRef, TurnSpan
from strands_tito.trajectory import FinishReason, Trajectory, TrajectoryError, pack_int32

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrefixCheck:
    """Whether call ``index``'s prompt starts with call ``index - 1``'s prompt + output.

    Attributes:
        index: The later call of the pair (1, 2, ...).
        shares_prefix: The prompt starts with the earlier call's whole prompt + output.
        expected_length: Length of that earlier prompt + output.
        divergence: First position where the prompt differs from it (its length if it is a strict prefix of it);
            None when the prefix is shared.
    """

    index: int
    shares_prefix: bool
    expected_length: int
    divergence: int | None = None

    def to_dict(self) -> PrefixCheckEntry:
        """Plain-JSON form (an entry of a record's ``prefix_report``)."""
        return {
            "index": self.index,
            "shares_prefix": self.shares_prefix,
            "expected_length": self.expected_length,
            "divergence": self.divergence,
        }


@dataclass
class TrajectoryRecord:
    """An assembled trajectory with what is known about where it came from and whether it is whole."""

    trajectory_id: str
    trajectory: Trajectory
    complete: bool
    reason: str | None = None
    rewards: list[float] = field(default_factory=list)
    model_id: str | None = None
    trace_ids: list[str] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    tool_parse_errors: list[dict[str, str]] = field(default_factory=list)
    calls: list[CallSpan] = field(default_factory=list)
    """Call trajectories only: every call, in order, exactly as recorded (empty for turn trajectories)."""
    prefix_report: list[PrefixCheck] = field(default_factory=list)
    """Call trajectories only: one check per consecutive pair of calls."""
    prefix_consistent: bool | None = None
    """Call trajectories: whether every call's prompt extends the previous call's prompt + output (then
    ``trajectory`` merges all calls; otherwise it holds the calls up to the first divergence). None for turns."""
    merged_calls: int = 0
    """Call trajectories: how many calls ``trajectory`` holds."""
    lineage: Lineage = field(default_factory=Lineage)
    """Its episode, parent trajectory, agent and sample index (from its first turn or call)."""

    @property
    def sample_index(self) -> int:
        """Which sample of its agent within the episode (0 until context rewrites start new samples)."""
        return self.lineage.sample_index

    @property
    def reward(self) -> float | None:
        """The last reward recorded (the convention Agent Lightning uses), or None."""
        return self.rewards[-1] if self.rewards else None

    def to_dict(self) -> ExportedRecord:
        """Plain-JSON form: one line of a JSONL export (:class:`~strands_tito.records.ExportedRecord`)."""
        return {
            "trajectory_id": self.trajectory_id,
            "complete": self.complete,
            "reason": self.reason,
            "model_id": self.model_id,
            "episode_id": self.lineage.episode_id,
            "sample_index": self.sample_index,
            "parent_trajectory_id": self.lineage.parent_trajectory_id,
            "agent_id": self.lineage.agent_id,
            "agent_name": self.lineage.agent_name,
            "invocation_index": self.lineage.invocation_index,
            "purpose": self.lineage.purpose,
            "node": self.lineage.node.to_dict() if self.lineage.node is not None else None,
            "reward": self.reward,
            "rewards": list(self.rewards),
            "trace_ids": list(self.trace_ids),
            "resource": dict(self.resource),
            "tool_parse_errors": list(self.tool_parse_errors),
            "prefix_consistent": self.prefix_consistent,
            "merged_calls": self.merged_calls,
            "calls": [call.to_dict() for call in self.calls],
            "prefix_report": [check.to_dict() for check in self.prefix_report],
            **self.trajectory.to_dict(),
        }


@dataclass
class _Pending:
    turns: dict[int, TurnSpan | SpanRef] = field(default_factory=dict)
    calls: dict[int, CallSpan | SpanRef] = field(default_factory=dict)
    # Insertion-ordered sets: a request of many rewards or traces of one trajectory stays linear (it was quadratic).
    rewards: dict[RewardSpan, None] = field(default_factory=dict)
    end: EndSpan | None = None
    conflicts: list[str] = field(default_factory=list)
    trace_ids: dict[str, None] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    last_seen: float = field(default_factory=time.monotonic)

    def has_all_turns(self) -> bool:
        by_calls = bool(self.calls) or (self.end is not None and self.end.unit == "calls")
        held: Mapping[int, object] = self.calls if by_calls else self.turns
        return self.end is not None and len(held) == self.end.turns and all(i in held for i in range(self.end.turns))


@dataclass
class AssemblerStats:
    """Counters a service reports."""

    turns: int = 0
    calls: int = 0
    duplicates: int = 0
    conflicts: int = 0
    reordered: int = 0
    late: int = 0
    complete: int = 0
    incomplete: int = 0


class TrajectoryAssembler:
    """Collects decoded spans per trajectory id and emits :class:`TrajectoryRecord` objects when they end.

    Args:
        remember_finished: How many finished trajectory ids to remember, so late duplicates are recognised.
        load: For readers that add :class:`~strands_tito.spans.SpanRef` (payload kept elsewhere, e.g. the
            collector's store): returns a trajectory's unpacked turns and calls by index when it is finished.
    """

    def __init__(
        self,
        remember_finished: int = 100_000,
        load: Callable[[str], tuple[dict[int, TurnSpan], dict[int, CallSpan]]] | None = None,
    ) -> None:
        self._load = load
        self._pending: dict[str, _Pending] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_finished
        self.stats = AssemblerStats()

    @property
    def open_trajectories(self) -> int:
        """Trajectories waiting for more spans."""
        return len(self._pending)

    def is_open(self, trajectory_id: str) -> bool:
        """Whether spans of this trajectory are held, waiting for the rest."""
        return trajectory_id in self._pending

    def add(
        self, span: Decoded, *, trace_id: str | None = None, resource: Mapping[str, Any] | None = None
    ) -> list[TrajectoryRecord]:
        """Take one decoded span; returns the trajectories it completed (usually none or one)."""
        tid = span.trajectory_id
        if tid in self._finished:
            self.stats.late += 1
            logger.warning("trajectory_id=<%s> | span arrived after the trajectory was written; ignored", tid)
            return []
        pending = self._pending.setdefault(tid, _Pending())
        pending.last_seen = time.monotonic()
        # The end signal is a root span of its own trace; only traces holding turns or rewards are worth listing.
        if trace_id and not isinstance(span, EndSpan):
            pending.trace_ids.setdefault(trace_id)
        if resource:
            pending.resource.update(resource)
        if isinstance(span, TurnSpan) or (isinstance(span, SpanRef) and span.kind == "turn"):
            self._add_turn(pending, span)
        elif isinstance(span, CallSpan | SpanRef):
            self._add_call(pending, span)
        elif isinstance(span, RewardSpan):
            pending.rewards.setdefault(span)  # an identical reward is a retry
        elif pending.end is None or pending.end == span:
            pending.end = span
        else:
            pending.conflicts.append(f"two different end signals ({pending.end} and {span})")
        if pending.has_all_turns():
            return [self._finish(tid, None)]
        return []

    def _add_turn(self, pending: _Pending, turn: TurnSpan | SpanRef) -> None:
        if self._add_indexed(pending, pending.turns, turn, "turn"):
            self.stats.turns += 1

    def _add_call(self, pending: _Pending, call: CallSpan | SpanRef) -> None:
        if self._add_indexed(pending, pending.calls, call, "call"):
            self.stats.calls += 1

    def _add_indexed(
        self, pending: _Pending, held: dict[int, Any], span: TurnSpan | CallSpan | SpanRef, what: str
    ) -> bool:
        """Keep a turn or call by its index; False for a duplicate (counted) or a conflicting one (noted)."""
        known = held.get(span.index)
        if known is not None:
            if known == span:
                self.stats.duplicates += 1
            else:
                self.stats.conflicts += 1
                pending.conflicts.append(f"{what} {span.index} arrived twice with different contents")
            return False
        if held and span.index < max(held):
            self.stats.reordered += 1
        held[span.index] = span
        return True

    def conflict(self, span: Decoded) -> str | None:
        """Why ``span`` contradicts what is already held for its trajectory (a different turn at the same index)."""
        pending = self._pending.get(span.trajectory_id)
        if pending is None or isinstance(span, RewardSpan | EndSpan):
            return None
        is_call = isinstance(span, CallSpan) or (isinstance(span, SpanRef) and span.kind == "call")
        held: Mapping[int, object] = pending.calls if is_call else pending.turns
        known = held.get(span.index)
        if known is None or known == span:
            return None
        what = "call" if is_call else "turn"
        return f"{what} {span.index} of trajectory {span.trajectory_id} conflicts with the one already received"

    def note_conflicts(self, trajectory_id: str, notes: list[str]) -> None:
        """Record conflicts found outside :meth:`add` (they make the trajectory incomplete)."""
        self._pending.setdefault(trajectory_id, _Pending()).conflicts.extend(notes)
        self.stats.conflicts += len(notes)

    def flush(self, idle_seconds: float | None = None) -> list[TrajectoryRecord]:
        """Finish trajectories idle for ``idle_seconds`` (all of them when None, e.g. at shutdown)."""
        now = time.monotonic()
        due = [tid for tid, p in self._pending.items() if idle_seconds is None or now - p.last_seen >= idle_seconds]
        return [self._finish(tid, "no end signal before the idle timeout or shutdown") for tid in due]

    def finish(self, trajectory_id: str, reason: str) -> TrajectoryRecord | None:
        """Finish one trajectory now (an explicit end decided outside the spans)."""
        return self._finish(trajectory_id, reason) if trajectory_id in self._pending else None

    def reopen(self, trajectory_id: str) -> None:
        """Take spans of a trajectory again after its record could not be kept (e.g. the store's disk was full):
        the reader adds its spans once more and it is finished again."""
        self._finished.pop(trajectory_id, None)

    def _finish(self, tid: str, missing_end_reason: str | None) -> TrajectoryRecord:
        pending = self._pending.pop(tid)
        self._finished[tid] = None
        while len(self._finished) > self._remember:
            self._finished.popitem(last=False)
        turns: Mapping[int, TurnSpan | SpanRef] = pending.turns
        calls: Mapping[int, CallSpan | SpanRef] = pending.calls
        try:
            if self._load is not None and any(isinstance(s, SpanRef) for s in (*turns.values(), *calls.values())):
                turns, calls = self._load(tid)
            record = build_record(
                tid,
                cast(Mapping[int, TurnSpan], turns),
                pending.end,
                pending.conflicts,
                missing_end_reason,
                calls=cast(Mapping[int, CallSpan], calls),
            )
        except Exception as e:  # a bug or bad data must cost this trajectory only, never the reader
            logger.exception("trajectory_id=<%s> | could not be assembled; written as incomplete", tid)
            record = quarantined(tid, e)
        record.rewards = [r.value for r in sorted(pending.rewards, key=lambda r: r.time_unix_nano)]
        record.trace_ids = list(pending.trace_ids)
        record.resource = pending.resource
        if record.complete:
            self.stats.complete += 1
        else:
            self.stats.incomplete += 1
        return record


def quarantined(tid: str, error: BaseException) -> TrajectoryRecord:
    """The record of a trajectory that could not be assembled: no tokens, incomplete, with the reason."""
    reason = f"quarantined: could not be assembled: {type(error).__name__}: {error}"
    return TrajectoryRecord(trajectory_id=tid, trajectory=Trajectory(trajectory_id=tid), complete=False, reason=reason)


def build_record(
    tid: str,
    turns: Mapping[int, TurnSpan],
    end: EndSpan | None,
    conflicts: list[str],
    missing_end_reason: str | None,
    *,
    calls: Mapping[int, CallSpan] | None = None,
) -> TrajectoryRecord:
    """Chain turns into a trajectory, checking every link; stops at the first break.

    A trajectory recorded as calls (``calls`` given, or an end signal counting calls) goes to
    :func:`build_call_record`.
    """
    if calls or (end is not None and end.unit == "calls"):
        return build_call_record(tid, calls or {}, end, conflicts, missing_end_reason, turns=turns)
    trajectory = Trajectory(trajectory_id=tid)
    problems = list(conflicts) + dropped_by_capture(end)
    model_id = None
    errors: list[dict[str, str]] = []
    expected_turns = end.turns if end is not None else (max(turns) + 1 if turns else 0)
    for index in range(expected_turns):
        turn = turns.get(index)
        if turn is None:
            problems.append(f"turn {index} is missing")
            break
        problem = chain_turn(trajectory, index, turn)
        if problem is not None:
            problems.append(problem)
            break
        model_id = model_id or turn.model_id
        errors.extend(turn.tool_parse_errors)
    extra = sorted(i for i in turns if i >= expected_turns)
    if extra:
        problems.append(f"turns {extra} come after the end signal's {expected_turns} turns")
    if not trajectory.turns and not problems:
        problems.append("no turns")  # an end signal alone is never a complete trajectory
    if end is None:
        problems.append(missing_end_reason or "no end signal")
    elif not problems and (end.length != len(trajectory) or end.crc32 != trajectory.crc32):
        problems.append(
            f"end signal says {end.length} tokens (crc {end.crc32}); "
            f"turns give {len(trajectory)} (crc {trajectory.crc32})"
        )
    return TrajectoryRecord(
        trajectory_id=tid,
        trajectory=trajectory,
        complete=not problems,
        reason="; ".join(problems) or None,
        model_id=model_id,
        tool_parse_errors=errors,
        lineage=turns[0].lineage if 0 in turns else Lineage(),
    )


def chain_turn(trajectory: Trajectory, index: int, turn: TurnSpan) -> str | None:
    """Append captured turn ``index`` to ``trajectory`` if it continues it exactly; else the problem (nothing added)."""
    if turn.prefix_length != len(trajectory) or turn.prefix_crc32 != trajectory.crc32:
        return (
            f"turn {index} continues a {turn.prefix_length}-token prefix (crc {turn.prefix_crc32}) but the "
            f"turns before it add up to {len(trajectory)} tokens (crc {trajectory.crc32})"
        )
    urls = [image.data_url() for image in turn.images]
    if None in urls:
        lost = [i for i, url in enumerate(urls) if url is None]
        return (
            f"turn {index}: images {lost} were over the capture size limit (STRANDS_TITO_MAX_IMAGE_BYTES) and "
            "were not captured"
        )
    try:
        trajectory.append_turn(
            turn.prompt_ids,
            turn.output_ids,
            finish_reason=cast(FinishReason, turn.finish_reason),
            prompt_logprobs=turn.prompt_logprobs,
            output_logprobs=turn.output_logprobs,
            cached_tokens=turn.cached_tokens,
            latency_s=turn.latency_s,
            request_id=turn.request_id,
            weight_version=turn.weight_version,
            weight_versions=turn.weight_versions,
            routed_experts=base64.b64encode(turn.routed_experts).decode() if turn.routed_experts else None,
            routed_experts_layout=turn.routed_experts_layout,
            top_p=turn.top_p,
            image_data=cast(list[str], urls),
            image_token_id=turn.image_token_id,
        )
    except TrajectoryError as e:
        return f"turn {index} is invalid: {e}"
    return None


def dropped_by_capture(end: EndSpan | None) -> list[str]:
    """What the end signal says the agent's capture dropped (its spool past the hard limit), as a problem."""
    if end is None or not end.dropped:
        return []
    what = "calls" if end.unit == "calls" else "turns"
    indices = f" ({what} {list(end.dropped_indices)})" if end.dropped_indices else ""
    return [f"the agent's capture dropped {end.dropped} span(s){indices}: its spool was past its hard limit"]


def _call_finish_reason(reason: str) -> FinishReason:
    """An OpenAI finish reason as a trajectory turn's: ``length`` and ``abort`` stay, everything else is a stop."""
    if reason == "length":
        return "length"
    if reason == "abort":
        return "abort"
    return "stop"


def check_prefix(index: int, previous: CallSpan, call: CallSpan) -> PrefixCheck:
    """Whether ``call``'s prompt starts with ``previous``'s prompt + output, and where it diverges if not."""
    expected = previous.prompt_ids + previous.output_ids
    prompt = call.prompt_ids
    if prompt[: len(expected)] == expected:
        return PrefixCheck(index, True, len(expected))
    limit = min(len(prompt), len(expected))
    divergence = next((i for i in range(limit) if prompt[i] != expected[i]), limit)
    return PrefixCheck(index, False, len(expected), divergence)


def build_call_record(
    tid: str,
    calls: Mapping[int, CallSpan],
    end: EndSpan | None,
    conflicts: list[str],
    missing_end_reason: str | None,
    *,
    turns: Mapping[int, TurnSpan] | None = None,
) -> TrajectoryRecord:
    """Check a call trajectory for data loss, report the prefix between consecutive calls, merge what chains up.

    Completeness is about data loss only (a missing or conflicting call, no end signal, totals that disagree); a
    prompt that does not extend the previous call (the server re-rendered the history differently) is reported in
    ``prefix_report``/``prefix_consistent`` and ends the merged ``trajectory`` there, but leaves the record complete.
    """
    problems = list(conflicts) + dropped_by_capture(end)
    if turns:
        problems.append(f"the trajectory holds both calls and turns {sorted(turns)}")
    expected_calls = end.turns if end is not None else (max(calls) + 1 if calls else 0)
    ordered: list[CallSpan] = []
    for index in range(expected_calls):
        call = calls.get(index)
        if call is None:
            problems.append(f"call {index} is missing")
            break
        ordered.append(call)
    extra = sorted(i for i in calls if i >= expected_calls)
    if extra:
        problems.append(f"calls {extra} come after the end signal's {expected_calls} calls")
    if not ordered and not problems:
        problems.append("no calls")
    length, crc32 = 0, 0
    for call in ordered:
        length += len(call.prompt_ids) + len(call.output_ids)
        crc32 = zlib.crc32(pack_int32(call.output_ids), zlib.crc32(pack_int32(call.prompt_ids), crc32))
    if end is None:
        problems.append(missing_end_reason or "no end signal")
    elif not problems and (end.length != length or end.crc32 != crc32):
        problems.append(
            f"end signal says {end.length} tokens (crc {end.crc32}) over its calls; calls give {length} (crc {crc32})"
        )

    report = [check_prefix(k, ordered[k - 1], ordered[k]) for k in range(1, len(ordered))]
    trajectory = Trajectory(trajectory_id=tid)
    merged = merge_calls(trajectory, ordered, report, problems)
    return TrajectoryRecord(
        trajectory_id=tid,
        trajectory=trajectory,
        complete=not problems,
        reason="; ".join(problems) or None,
        model_id=next((c.model_id for c in ordered if c.model_id), None),
        calls=ordered,
        prefix_report=report,
        prefix_consistent=all(check.shares_prefix for check in report),
        merged_calls=merged,
        lineage=ordered[0].lineage if ordered else Lineage(),
    )


def merge_calls(trajectory: Trajectory, ordered: list[CallSpan], report: list[PrefixCheck], problems: list[str]) -> int:
    """Append calls to ``trajectory`` while each extends the one before; how many were merged (a call that cannot
    be merged adds its problem to ``problems``)."""
    merged = 0
    for k, call in enumerate(ordered):
        if k and not report[k - 1].shares_prefix:
            break
        try:
            trajectory.append_turn(
                call.prompt_ids[len(trajectory) :],
                call.output_ids,
                finish_reason=_call_finish_reason(call.finish_reason),
                output_logprobs=call.output_logprobs,
                request_id=call.request_id,
            )
        except TrajectoryError as e:
            problems.append(f"call {k} cannot be merged: {e}")
            break
        merged += 1
    return merged
