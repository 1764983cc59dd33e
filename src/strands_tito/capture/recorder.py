"""Trace capture: token data on Strands' own spans, trajectory end signals, rewards, and turning it all on.

The model provider calls :func:`record_turn` inside ``stream()``, where the current span is Strands' ``chat`` span.
A trajectory ends when its model is reset, when its agent is garbage-collected, or at process exit; each end emits a
small ``tito.trajectory.end`` span carrying the totals, so a reader can tell a whole trajectory from one missing its
last turn.

Capture is on whenever a recording span is current (set ``STRANDS_TITO_CAPTURE=0`` to keep token data off spans).
Getting spans *out* of the process is switched on by environment variables, no code change (see
:func:`strands_tito.capture.switch_on.enable_from_env` and ``docs/span-schema.md``).
"""

from __future__ import annotations

import atexit
import base64
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from strands_tito import spans
from strands_tito.assembly import TrajectoryAssembler, TrajectoryRecord
from strands_tito.capture.deferred import call_when_released, run_released_calls
from strands_tito.capture.endpoint_check import endpoint_still_failing
from strands_tito.capture.lineage import attach_span_tree, lineage_of, note_turn
from strands_tito.errors import StrandsTitoError
from strands_tito.exporters import ExporterSettings, make_exporter
from strands_tito.records import AGL_ATTEMPT_ID as AGL_ATTEMPT_ID
from strands_tito.records import AGL_ROLLOUT_ID as AGL_ROLLOUT_ID
from strands_tito.records import agentlightning_identity_of
from strands_tito.settings import CaptureConfigError as CaptureConfigError
from strands_tito.settings import get_settings, variable
from strands_tito.span_images import encode_images
from strands_tito.span_lineage import Lineage, lineage_attributes
from strands_tito.trajectory import Trajectory, Turn
from strands_tito.upstream import opentelemetry_sdk, strands_sdk

logger = logging.getLogger(__name__)

ENV_CAPTURE = variable("capture").name
ENV_ENCODING = variable("span_encoding").name

_tracer = trace.get_tracer("strands_tito")
_lock = threading.RLock()  # re-entrant: garbage collection may run a finalizer on a thread that holds it


class CallSequence(Protocol):
    """A trajectory recorded call by call (a stock OpenAI-compatible provider; see :mod:`strands_tito.capture.openai`).

    Its end signal carries :meth:`end_totals` with ``tito.end.unit = "calls"``.
    """

    @property
    def trajectory_id(self) -> str:
        """The trajectory id every call span of it carries."""

    def end_totals(self) -> tuple[int, int, int]:
        """``(calls, tokens, crc32)``: calls recorded, the sum of their prompt and output lengths, and the running
        CRC-32 over each call's prompt then output ids (little-endian int32)."""


_open: dict[str, Trajectory | CallSequence] = {}  # trajectories with turns on spans and no end signal yet
# Turn/call spans the OTLP spool had to drop past its hard limit, per trajectory: (count, indices). The end signal
# carries them, so the collector's record says exactly what is missing.
_dropped: dict[str, tuple[int, list[int]]] = {}
# Trajectories that had a turn (on a span or not) and have not ended, each with the id of the agent state that owns
# it (its own id when the caller gave none; an id, not the state: the state's release is what ends the trajectory):
# what record_reward may choose from when it is not told whose reward it is.
_active: dict[str, tuple[Trajectory | CallSequence, int]] = {}
_lineages: dict[str, Lineage] = {}  # open trajectories' episode, parent and agent, fixed at their first span
_exit_hook_registered = False
#: The processors capture added to each tracer provider (kept here: nothing is written onto the SDK's objects).
_attached: weakref.WeakKeyDictionary[TracerProvider, list[SpanProcessor]] = weakref.WeakKeyDictionary()
_exit_lock = threading.Lock()


class RewardTargetError(StrandsTitoError, ValueError):
    """:func:`record_reward` was not told whose reward it is and cannot tell: no agent has an open trajectory, or
    several do (concurrent rollouts). :attr:`choices` lists the open trajectories' ids."""

    def __init__(self, message: str, choices: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.choices = list(choices)


def capture_enabled() -> bool:
    """False only when ``STRANDS_TITO_CAPTURE`` is ``0``/``false``/``off``."""
    return get_settings().capture_on


def span_encoding() -> spans.Encoding:
    """``packed`` (default: int32/float32 bytes) or ``array`` (plain arrays, readable in trace viewers)."""
    return get_settings().span_encoding


def agentlightning_identity(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Rollout and attempt ids when running under Agent Lightning's controller (parsed from ``AGL_EVENT_URL``, in
    ``environ`` when given, else as the settings read it)."""
    event_url = get_settings().agl_event_url if environ is None else environ.get("AGL_EVENT_URL", "")
    return dict(_identity_of(event_url))


@functools.lru_cache(maxsize=8)
def _identity_of(event_url: str) -> tuple[tuple[str, str], ...]:
    return tuple(agentlightning_identity_of(event_url).items())


def check_span_limits(limits: Any) -> None:
    """Fail loudly if the SDK's span limits could evict or cut strands-tito attributes."""
    if limits is None:
        return
    needed = spans.MAX_OWN_ATTRIBUTES + spans.STRANDS_ATTRIBUTE_BUDGET
    count = getattr(limits, "max_span_attributes", None)
    if count is not None and count < needed:
        raise CaptureConfigError(
            f"span attribute count limit {count} < {needed}: the SDK would evict attributes of chat spans; "
            f"raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT (or OTEL_ATTRIBUTE_COUNT_LIMIT) to at least {needed}"
        )
    length = getattr(limits, "max_span_attribute_length", None)
    if length is not None and length < 256:
        raise CaptureConfigError(
            f"span attribute length limit {length} < 256 would cut trajectory ids; unset "
            "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT (OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT may stay to shrink events)"
        )


def register_exit_handler() -> None:
    """Have :func:`shutdown_capture` run at exit, once per process, before every tracer provider made so far shuts
    down: atexit runs handlers last in, first out, so each call moves the one registration after the newest provider
    (whose exporters it must flush while they are still up)."""
    with _exit_lock:
        atexit.unregister(shutdown_capture)
        atexit.register(shutdown_capture)


def _register_exit_hook() -> None:
    # At the first captured turn, i.e. after the application's TracerProvider exists.
    global _exit_hook_registered
    if not _exit_hook_registered:
        _exit_hook_registered = True
        register_exit_handler()


def record_turn(
    trajectory: Trajectory,
    turn: Turn,
    *,
    model_id: str | None,
    tool_parse_errors: Sequence[dict[str, str]] = (),
    image_token_id: int | None = None,
    agent: AgentState | None = None,
) -> None:
    """Put one recorded turn, its lineage and GenAI ids on the current span (Strands' ``chat`` span in ``stream``).

    The turn's images go on the span as ``tito.images``; an image over ``STRANDS_TITO_MAX_IMAGE_BYTES`` goes as its
    hash only (logged here; the assembled trajectory is then incomplete at this turn).
    """
    _note_active(trajectory, agent)
    if agent is not None and agent.purpose is not None and capture_enabled():
        # A call outside the agent's turns has no chat span of Strands': it gets its own, in the agent's trace.
        own = _tracer.start_span(spans.SPAN_TURN, attributes={"gen_ai.operation.name": spans.SPAN_TURN})
        try:
            with trace.use_span(own):
                _record_turn_on_span(trajectory, turn, model_id, tool_parse_errors, image_token_id, agent)
        finally:
            own.end()
        end_trajectory(trajectory, "done")  # one generation: complete at once
        return
    _record_turn_on_span(trajectory, turn, model_id, tool_parse_errors, image_token_id, agent)


def _record_turn_on_span(  # noqa: PLR0917  record_turn's arguments, handed on once
    trajectory: Trajectory,
    turn: Turn,
    model_id: str | None,
    tool_parse_errors: Sequence[dict[str, str]],
    image_token_id: int | None,
    agent: AgentState | None,
) -> None:
    span = trace.get_current_span()
    if not span.is_recording() or not capture_enabled():
        return
    start, end = turn.output_start, turn.output_start + turn.output_length
    encoding = span_encoding()
    prompt_ids: Any
    output_ids: Any
    prompt_logprobs: Any
    output_logprobs: Any
    if encoding == "packed":
        # The trajectory keeps packed copies as it grows: slicing them costs a memcpy, not a re-encode.
        ids, lps, first = trajectory.packed_ids, trajectory.packed_logprobs, 4 * turn.prompt_start
        prompt_ids, output_ids = bytes(ids[first : 4 * start]), bytes(ids[4 * start : 4 * end])
        prompt_logprobs, output_logprobs = bytes(lps[first : 4 * start]), bytes(lps[4 * start : 4 * end])
    else:
        prompt_ids, output_ids = trajectory.token_ids[turn.prompt_start : start], trajectory.token_ids[start:end]
        lp = trajectory.logprobs or []
        prompt_logprobs, output_logprobs = lp[turn.prompt_start : start], lp[start:end]
    if trajectory.logprobs is None:  # recorded without logprobs: the span carries none
        prompt_logprobs = output_logprobs = None
    attributes = spans.turn_attributes(
        trajectory.trajectory_id,
        turn.index,
        turn.prompt_start,
        turn.prefix_crc32,
        prompt_ids,
        prompt_logprobs,
        output_ids,
        output_logprobs,
        finish_reason=turn.finish_reason,
        encoding=encoding,
        cached_tokens=turn.cached_tokens,
        latency_s=turn.latency_s,
        request_id=turn.request_id,
        weight_version=turn.weight_version,
        weight_versions=turn.weight_versions,
        model_id=model_id,
        tool_parse_errors=tool_parse_errors,
        routed_experts=base64.b64decode(turn.routed_experts) if turn.routed_experts else None,
        routed_experts_layout=turn.routed_experts_layout,
        top_p=None if turn.top_p_offsets is None else (turn.top_p_token_ids or (), turn.top_p_offsets),
        images=_turn_images(trajectory, turn, image_token_id),
    )
    _put_on_span(span, attributes, trajectory, agent)


def _note_active(trajectory: Trajectory | CallSequence, agent: AgentState | None) -> None:
    with _lock:
        _active[trajectory.trajectory_id] = (trajectory, id(agent) if agent is not None else id(trajectory))


def _turn_images(trajectory: Trajectory, turn: Turn, token_id: int | None) -> bytes | None:
    if not turn.image_data:
        return None
    limit = get_settings().max_image_bytes
    value, omitted = encode_images(turn.image_data, token_id, limit)
    if omitted:
        logger.warning(
            "trajectory_id=<%s>, turn=<%d>, images=<%s>, limit=<%d> | images over STRANDS_TITO_MAX_IMAGE_BYTES go "
            "on the span as their hash only; the captured trajectory will be incomplete",
            trajectory.trajectory_id,
            turn.index,
            omitted,
            limit,
        )
    return value


def record_call(
    calls: CallSequence,
    index: int,
    prompt_ids: Sequence[int],
    output_ids: Sequence[int],
    output_logprobs: Sequence[float | None] | None,
    *,
    finish_reason: str,
    model_id: str | None = None,
    request_id: str | None = None,
    agent: AgentState | None = None,
) -> bool:
    """Put one OpenAI-compatible call on the current span (Strands' ``chat`` span inside ``OpenAIModel.stream``).

    Returns whether it went on a span (capture on and a recording span current).
    """
    _note_active(calls, agent)
    span = trace.get_current_span()
    if not span.is_recording() or not capture_enabled():
        return False
    attributes = spans.call_attributes(
        calls.trajectory_id,
        index,
        prompt_ids,
        output_ids,
        output_logprobs,
        finish_reason=finish_reason,
        encoding=span_encoding(),
        model_id=model_id,
        request_id=request_id,
    )
    _put_on_span(span, attributes, calls, agent)
    return True


def _put_on_span(
    span: Any,
    attributes: dict[str, Any],
    owner: Trajectory | CallSequence,
    agent: AgentState | None = None,
) -> None:
    """Set a turn's or call's attributes, refusing to let the SDK's count limit evict any, and track its owner."""
    identity = agentlightning_identity()
    attributes.update(identity)
    tid = owner.trajectory_id
    if agent is None or agent.purpose is None:
        note_turn(tid)
    with _lock:
        lineage = _lineages.get(tid)
        if lineage is None and agent is not None and agent.lineage is not None:
            # A later sample of the agent's episode (its history was rewritten): the first sample's place.
            lineage = _lineages[tid] = replace(agent.lineage, sample_index=agent.sample_index)
        elif lineage is None:
            lineage = _lineages[tid] = lineage_of(
                span,
                tid,
                agent_id=agent.agent_id if agent is not None else None,
                agent_name=agent.agent_name if agent is not None else None,
                episode_of=_lineages,
                rollout_id=identity.get(AGL_ROLLOUT_ID),
                purpose=agent.purpose if agent is not None else None,
            )
            if agent is not None:
                agent.lineage = lineage
    attributes.update(lineage_attributes(lineage, identity.get(AGL_ROLLOUT_ID) or tid))
    limits = opentelemetry_sdk.limits_of_span(span)
    check_span_limits(limits)
    existing = len(getattr(span, "attributes", None) or {})
    limit = getattr(limits, "max_span_attributes", None)
    if limit is not None and existing + len(attributes) > limit:
        raise CaptureConfigError(
            f"the chat span already has {existing} attributes; adding {len(attributes)} would pass the limit {limit} "
            "and evict data; raise OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"
        )
    span.set_attributes(attributes)
    with _lock:
        _open[owner.trajectory_id] = owner
    _register_exit_hook()


def note_dropped(trajectory_id: str, index: int | None) -> None:
    """Count a span of ``trajectory_id`` (turn or call ``index``) capture could not keep; its end signal says so."""
    with _lock:
        count, indices = _dropped.get(trajectory_id, (0, []))
        if index is not None:
            indices.append(index)
        _dropped[trajectory_id] = (count + 1, indices)


def end_trajectory(trajectory: Trajectory | CallSequence, reason: str) -> None:
    """Emit the end signal of a trajectory whose turns (or calls) went out on spans (once; later calls do nothing)."""
    with _lock:
        _active.pop(trajectory.trajectory_id, None)
        _lineages.pop(trajectory.trajectory_id, None)
        if _open.pop(trajectory.trajectory_id, None) is None:
            return
        dropped, dropped_indices = _dropped.pop(trajectory.trajectory_id, (0, []))
    unit: dict[str, Any] = {}
    if dropped:
        unit[spans.END_DROPPED] = dropped
        unit[spans.END_DROPPED_INDICES] = sorted(dropped_indices)
    if isinstance(trajectory, Trajectory):
        turns, length, crc32 = len(trajectory.turns), len(trajectory), trajectory.crc32
    else:
        (turns, length, crc32), unit = trajectory.end_totals(), {spans.END_UNIT: "calls"}
    attributes: dict[str, Any] = {
        spans.SCHEMA: spans.SCHEMA_VERSION,
        spans.KIND: "end",
        spans.TRAJECTORY_ID: trajectory.trajectory_id,
        spans.END_REASON: reason,
        spans.END_TURNS: turns,
        spans.END_LENGTH: length,
        spans.END_CRC32: crc32,
        **unit,
        **agentlightning_identity(),
    }
    # A root span of its own: the end may come long after the agent's trace (reset, garbage collection, exit).
    _tracer.start_span(spans.SPAN_END, context=Context(), attributes=attributes).end()


class AgentState(dict[str, Any]):
    """The one per-agent capture state: one agent's trajectory, kept in the ``model_state`` Strands holds per agent.

    Every strands-tito provider (and the stock-OpenAI capture) stores a subclass of it there; capture finds an agent's
    trajectory by this type, without knowing the providers. Strands deep-copies ``model_state`` around every model
    call; this object hands out itself instead, so the trajectory is neither copied (O(length) per turn) nor lost. As
    a dict it serializes to ``{}`` with a session manager; a restored session then starts a new trajectory. The
    trajectory gets its end signal ("released") from capture's thread once the state is garbage-collected.
    """

    def __init__(self, trajectory: Trajectory | CallSequence) -> None:
        super().__init__()
        self.trajectory = trajectory
        self.agent_id: str | None = None
        self.agent_name: str | None = None
        #: The lineage of the agent's first sample on spans; later samples keep its episode, parent and agent.
        self.lineage: Lineage | None = None
        #: What a state of a model call outside an agent's turns served (``Lineage.purpose``); None for an agent's.
        self.purpose: str | None = None
        attach_span_tree()  # before the agent's spans start, so its sub-agents find it
        call_when_released(self, end_trajectory, trajectory, "released")  # queued, sent by capture's thread

    @property
    def samples(self) -> Sequence[Trajectory | CallSequence]:
        """The agent's samples in this episode, in order (a provider that starts new samples lists them all)."""
        return [self.trajectory]

    @property
    def sample_index(self) -> int:
        """Which sample of the episode :attr:`trajectory` is."""
        return 0

    def note_agent(self, agent: Any) -> None:
        """Remember the Strands agent's ``agent_id`` and ``name`` (its spans' ``gen_ai.agent.*``), once."""
        if agent is not None and self.agent_name is None:
            self.agent_id, self.agent_name = _text(getattr(agent, "agent_id", "")), _text(getattr(agent, "name", ""))

    def __deepcopy__(self, memo: dict[int, Any]) -> AgentState:
        return self

    def __copy__(self) -> AgentState:
        return self

    # Identity, not dict contents: two agents' states are never "equal".
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)


def state_of(agent: Any) -> AgentState | None:
    """The capture state a strands-tito model keeps for ``agent`` (None before the agent's first model call)."""
    model_state = strands_sdk.model_state(agent) or {}
    found = [v for v in model_state.values() if isinstance(v, AgentState)]
    return found[0] if found else None


def lineage_of_trajectory(trajectory_id: str) -> Lineage | None:
    """The episode, parent and agent of a trajectory with turns on spans that has not ended yet (else None)."""
    with _lock:
        return _lineages.get(trajectory_id)


def record_reward(
    value: float,
    *,
    agent: Any = None,
    trajectory: Trajectory | CallSequence | None = None,
    name: str = "reward",
    episode: bool = False,
) -> None:
    """Record a reward for a trajectory on its trace (the collector forwards it; the last one counts).

    Args:
        value: The reward.
        agent: Whose trajectory it is (an agent using a strands-tito model, or a stock ``OpenAIModel`` under capture;
            every sample of its episode gets the reward). Default: the one agent in this process with an open
            trajectory (one that had a turn and has not ended); with several (concurrent rollouts), or none, it
            raises :class:`RewardTargetError` rather than guess. Pass ``agent=`` wherever rollouts may overlap.
        trajectory: The trajectory itself, instead of ``agent``.
        name: A label for the reward.
        episode: Reward the whole episode of that trajectory instead: every agent's trajectory in it that is still
            open (not yet ended) in this process gets the reward.

    Raises:
        RewardTargetError: neither ``agent`` nor ``trajectory`` given, and not exactly one agent with an open
            trajectory (the error names the open trajectories); or ``agent`` has no trajectory yet.
        ValueError: ``episode=True`` for a trajectory with no open episode.
    """
    targets: list[str] = []
    if trajectory is None and agent is not None:
        state = state_of(agent)
        if state is None:
            raise RewardTargetError("record_reward: the agent has no trajectory yet (no model call recorded)")
        trajectory, targets = state.trajectory, [t.trajectory_id for t in state.samples]
    if trajectory is None:
        trajectory, targets = _only_open_trajectory()
    targets = targets or [trajectory.trajectory_id]
    if episode:
        with _lock:
            lineage = _lineages.get(trajectory.trajectory_id)
            if lineage is None:
                raise ValueError("record_reward: the trajectory has no open episode (no turn on a span, or ended)")
            targets = [tid for tid, other in _lineages.items() if other.episode_id == lineage.episode_id]
    for tid in targets:
        attributes: dict[str, Any] = {
            spans.SCHEMA: spans.SCHEMA_VERSION,
            spans.KIND: "reward",
            spans.TRAJECTORY_ID: tid,
            spans.REWARD_VALUE: float(value),
            spans.REWARD_NAME: name,
            **agentlightning_identity(),
        }
        # A child of the current span when there is one, so the reward sits on the rollout's trace.
        _tracer.start_span(spans.SPAN_REWARD, attributes=attributes).end()


def _only_open_trajectory() -> tuple[Trajectory | CallSequence, list[str]]:
    """The trajectory (and every sample id of its agent) of the one agent with open trajectories in this process."""
    run_released_calls()  # released agents' trajectories, still queued to end, are not open
    with _lock:
        active = list(_active.values())
    owners: dict[int, list[Trajectory | CallSequence]] = {}
    for owned, owner in active:
        owners.setdefault(owner, []).append(owned)
    if len(owners) == 1:
        (samples,) = owners.values()
        return samples[-1], [t.trajectory_id for t in samples]
    choices = sorted(owned.trajectory_id for owned, _ in active)
    if not choices:
        raise RewardTargetError("record_reward: no open trajectory for the reward (pass agent= or trajectory=)")
    raise RewardTargetError(
        f"record_reward: {len(owners)} agents have open trajectories ({', '.join(choices)}); pass agent= (or "
        "trajectory=) to say whose reward it is",
        choices,
    )


def shutdown_capture(timeout: float | None = None) -> None:
    """End every open trajectory and flush the tracer provider, waiting at most ``timeout`` seconds."""
    run_released_calls()  # end signals of released agents still queued
    with _lock:
        pending = list(_open.values())
    logger.debug("open_trajectories=<%d> | ending open trajectories and flushing", len(pending))
    for trajectory in pending:
        end_trajectory(trajectory, "exit")
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is None:
        return
    limit = timeout if timeout is not None else get_settings().flush_timeout
    quiet = endpoint_still_failing()
    if quiet:  # already reported, and it still fails: to the spool at once, no wait for the exporter's retries
        limit = 0.0
    deadline = time.monotonic() + limit
    # strands-tito's own processors first, so that a slow processor of the application's cannot use up the time
    # (the SDK stops flushing at the first processor that fails). The OTLP spool waits for the acknowledgement and,
    # past the deadline, keeps what is left on disk for the next process.
    for processor in list(_attached.get(provider, ()) if isinstance(provider, TracerProvider) else ()):
        left = deadline - time.monotonic()
        if (left <= 0 or not processor.force_flush(int(left * 1000))) and not quiet:
            logger.warning("timeout=<%s> | strands-tito spans still undelivered at exit stay in the spool", limit)
    # The SDK's BatchSpanProcessor ignores this timeout; each export is still bounded by the exporter's own
    # deadline (OTEL_EXPORTER_OTLP_TIMEOUT), and no thread can be started to bound it at interpreter exit.
    if not flush(int(max(deadline - time.monotonic(), 0) * 1000)) and not quiet:
        logger.error("timeout=<%s> | spans were still being exported at exit; some may be lost", limit)


class TrajectorySpanProcessor(SpanProcessor):
    """Embedded capture: reassembles trajectories from this process's spans and writes them to JSONL.

    It uses the same :class:`TrajectoryAssembler` as the collector service, and the collector's JSONL exporter (built
    by the exporter registry, in its shared mode: agents in other processes may append to the same file).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.assembler = TrajectoryAssembler()
        self.exporter = make_exporter(f"jsonl:{os.fspath(path)}", ExporterSettings(jsonl_shared=True))
        self._lock = threading.Lock()
        self.errors = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Decode a finished strands-tito span and write any trajectory it completes."""
        attributes = dict(span.attributes or {})
        if not spans.is_tito_span(attributes):
            return
        try:
            decoded = spans.decode_span(attributes, span.end_time or 0)
        except spans.SpanSchemaError as e:
            self.errors += 1
            logger.error("span=<%s>, error=<%s> | strands-tito span could not be decoded", span.name, e)
            return
        resource = dict(span.resource.attributes) if span.resource is not None else {}
        trace_id = format(span.context.trace_id, "032x") if span.context is not None else None
        with self._lock:
            for record in self.assembler.add(decoded, trace_id=trace_id, resource=resource):
                self._write(record)

    def shutdown(self) -> None:
        """Write whatever is still open (as incomplete) and close the file."""
        with self._lock:
            for record in self.assembler.flush():
                self._write(record)
            self.exporter.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Records are written as soon as they complete; nothing is buffered."""
        return True

    def _write(self, record: TrajectoryRecord) -> None:
        self.exporter.write([record.to_dict()], self.exporter.next_position())


def add_processors(provider: TracerProvider, processors: Sequence[SpanProcessor]) -> None:
    """Attach processors to a provider once, after checking its limits."""
    check_span_limits(opentelemetry_sdk.limits_of_provider(provider))
    attached = _attached.setdefault(provider, [])
    for processor in processors:
        if processor not in attached:
            provider.add_span_processor(processor)
            attached.append(processor)


def attached_processors(provider: TracerProvider) -> list[SpanProcessor]:
    """The span processors capture attached to ``provider`` (to read their counters, e.g. the spool's)."""
    return list(_attached.get(provider, ()))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
