"""`SGLangModel`: a token-in/token-out Strands model provider over SGLang's native ``/generate``."""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
import uuid
import weakref
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from strands.hooks import BeforeToolCallEvent
from strands.models.model import BaseModelConfig, Model
from strands.types.content import Messages, SystemContentBlock
from strands.types.event_loop import StopReason
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolChoice, ToolSpec
from transformers import PreTrainedTokenizerBase

from .capture import end_trajectory, end_when_collected, record_turn
from .client import (
    SGLangCancelledError,
    SGLangClient,
    SGLangClientError,
    SGLangContextLengthError,
    SGLangThrottledError,
)
from .prompt import PromptEncoder
from .tool_parsers import HermesToolParser, ToolCall, ToolParser
from .trajectory import FinishReason, Trajectory, TrajectoryError

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

STATE_KEY = "strands_tito"
INVALID_TOOL_NAME = "invalid_tool_call"


class SGLangResponseError(SGLangClientError):
    """A ``/generate`` reply does not follow the protocol (missing fields, wrong lengths, NaN, ...).

    Nothing from the reply is recorded.
    """


class SGLangAbortedError(SGLangClientError):
    """The server aborted the generation (``finish_reason.type == "abort"``): an error, never a normal turn."""


class HistoryRewrittenError(SGLangClientError):
    """Messages the trajectory already holds were removed or changed (e.g. by a trimming conversation manager).

    Token-in/token-out needs an append-only history; use ``NullConversationManager``.
    """


class SGLangConfig(BaseModelConfig, total=False):
    """Configuration of :class:`SGLangModel`.

    Attributes:
        model_id: Name reported to Strands (and on its spans).
        sampling_params: SGLang sampling parameters; ``skip_special_tokens`` defaults to False so tool markup that
            uses special tokens survives in the text.
        return_logprob: Record logprobs (default True).
        return_routed_experts: Record MoE routing per turn (R3; needs ``--enable-return-routed-experts``).
        enable_thinking: Passed to the chat template; None keeps the template's default.
        context_window_limit: Context length; when unset it is read from the server's ``/v1/models``.
    """

    model_id: str
    sampling_params: dict[str, Any]
    return_logprob: bool
    return_routed_experts: bool
    enable_thinking: bool | None


class _AgentState(dict[str, Any]):
    """Per-agent trajectory state, stored in the ``model_state`` Strands keeps for each agent.

    Strands deep-copies ``model_state`` around every model call; this object hands out itself instead, so the
    trajectory is neither copied (that would cost O(length) per turn) nor lost. As a dict it serializes to ``{}``
    with a session manager; a restored session then starts a new trajectory.
    """

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch
        self.trajectory = Trajectory()
        self.cursor = 0
        self.last_output_text: str | None = None
        self.tool_parse_errors: dict[str, int] = {}
        end_when_collected(self, self.trajectory)

    def __deepcopy__(self, memo: dict[int, Any]) -> _AgentState:
        return self

    # Identity, not dict contents: two agents' states are never "equal".
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:  # type: ignore[override]
        return id(self)

    def __copy__(self) -> _AgentState:
        return self


@dataclass(frozen=True)
class _Reply:
    output_ids: list[int]
    output_logprobs: list[float | None] | None
    prompt_logprobs: list[float | None] | None
    text: str
    finish_reason: FinishReason
    matched_stop: int | str | None
    cached_tokens: int
    completion_tokens: int
    latency_s: float | None
    request_id: str | None
    weight_version: str | None
    routed_experts: str | None


class SGLangModel(Model):
    """Strands model provider that sends token IDs to SGLang and records the exact token trajectory.

    Construct with a client (``SGLangModel(client=..., tokenizer=..., tool_parser=...)``) or a URL
    (``SGLangModel(tokenizer=..., base_url=...)``). Each agent using the model gets its own trajectory (kept in the
    per-agent model state Strands passes to :meth:`stream`); ``model.token_manager`` is the trajectory of the agent
    that called the model last, which is the agent's when only one uses it.

    Args:
        tokenizer: The policy's Hugging Face tokenizer, with its chat template.
        client: An :class:`SGLangClient`; shared clients pool connections across models.
        base_url: Server URL, used to create a client when ``client`` is not given.
        tool_parser: How tool calls are read from output text (default :class:`HermesToolParser`).
        **config: :class:`SGLangConfig` keys.
    """

    def __init__(
        self,
        *,
        tokenizer: PreTrainedTokenizerBase,
        client: SGLangClient | None = None,
        base_url: str | None = None,
        tool_parser: ToolParser | None = None,
        **config: Any,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("SGLangModel needs client= or base_url=")
            client = SGLangClient(base_url)
        self.client = client
        self.tokenizer = tokenizer
        self.tool_parser = tool_parser or HermesToolParser()
        self.config: SGLangConfig = {"model_id": "sglang", "return_logprob": True, "return_routed_experts": False}
        self.update_config(**config)
        self._epoch = 0
        self._default_state = _AgentState(0)
        self._last_state = self._default_state
        self._malformed_calls: dict[str, str] = {}
        self._hooked_agents: weakref.WeakSet[Any] = weakref.WeakSet()
        self._states: weakref.WeakSet[_AgentState] = weakref.WeakSet({self._default_state})

    # -- configuration -------------------------------------------------------------------------------------------

    def update_config(self, **model_config: Any) -> None:
        """Update configuration keys (see :class:`SGLangConfig`)."""
        self.config.update(cast(SGLangConfig, model_config))
        self._prompts = PromptEncoder(self.tokenizer, enable_thinking=self.config.get("enable_thinking"))

    def get_config(self) -> SGLangConfig:
        """Return the configuration."""
        return self.config

    # -- trajectory access (single-agent use) ----------------------------------------------------------------------

    @property
    def token_manager(self) -> Trajectory:
        """Trajectory of the agent that used this model last (``token_ids``, ``loss_mask``, ``logprobs``, ...)."""
        return self._last_state.trajectory

    @property
    def trajectory(self) -> Trajectory:
        """Same as :attr:`token_manager`."""
        return self._last_state.trajectory

    @property
    def routed_experts(self) -> list[str]:
        """Per-turn base64 routed-expert slices of :attr:`token_manager`."""
        return self._last_state.trajectory.routed_experts

    @property
    def tool_parse_errors(self) -> dict[str, int]:
        """Malformed tool calls per tool name in :attr:`token_manager`'s episode."""
        return self._last_state.tool_parse_errors

    def trajectory_of(self, agent: Any) -> Trajectory:
        """The trajectory of one agent that shares this model with others."""
        state = getattr(agent, "_model_state", {}).get(STATE_KEY)
        return state.trajectory if isinstance(state, _AgentState) and state.epoch == self._epoch else Trajectory()

    def reset(self) -> None:
        """Start a new episode: every agent's next call starts a new trajectory (earlier ones stay as they were).

        Trajectories whose turns went out on spans get their end signal now.
        """
        for state in list(self._states):
            end_trajectory(state.trajectory, "reset")
        self._epoch += 1
        self._default_state = _AgentState(self._epoch)
        self._last_state = self._default_state
        self._states.add(self._default_state)

    # -- Strands Model API -----------------------------------------------------------------------------------------

    def _state(self, model_state: dict[str, Any] | None) -> _AgentState:
        if model_state is None:
            state = self._default_state
        else:
            found = model_state.get(STATE_KEY)
            state = found if isinstance(found, _AgentState) and found.epoch == self._epoch else _AgentState(self._epoch)
            model_state[STATE_KEY] = state
        if state.epoch != self._epoch:
            state = self._default_state = _AgentState(self._epoch)
        self._states.add(state)
        return state

    def _prompt_ids(
        self,
        state: _AgentState,
        messages: Messages,
        tool_specs: list[ToolSpec] | None,
        system_prompt: str | None,
    ) -> list[int]:
        trajectory = state.trajectory
        if not trajectory.turns:
            return self._prompts.first_prompt(messages, tool_specs, system_prompt)
        cursor = state.cursor
        previous = messages[cursor - 1] if 0 < cursor <= len(messages) else None
        if previous is None or previous["role"] != "assistant" or _plain_text(previous) != state.last_output_text:
            raise HistoryRewrittenError(
                f"the agent's history no longer holds the model's last message at index {cursor - 1} "
                f"({len(messages)} messages now); strands-tito needs an append-only history "
                "(use NullConversationManager)"
            )
        return self._prompts.continuation(messages[cursor:], previous, trajectory.token_ids)

    async def _context_limit(self) -> int | None:
        limit = self.config.get("context_window_limit")
        if limit:
            return limit
        try:
            return await self.client.max_model_len()
        except SGLangClientError as e:
            logger.warning("error=<%s> | could not read the context length; will ask again next turn", e)
            return None

    async def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        system_prompt_content: list[SystemContentBlock] | None = None,
        invocation_state: dict[str, Any] | None = None,
        model_state: dict[str, Any] | None = None,
        cancel_signal: threading.Event | None = None,
        **kwargs: Any,
    ) -> AsyncIterable[StreamEvent]:
        """Generate one assistant turn from token IDs and record it in the agent's trajectory.

        Raises:
            ContextWindowOverflowException: No room is left in the context window.
            ModelThrottledException: The server stayed overloaded through every retry.
            SGLangAbortedError, SGLangResponseError, HistoryRewrittenError, SGLangClientError: see their docs.
        """
        state = self._state(model_state)
        self._last_state = state
        agent = (invocation_state or {}).get("agent")
        if agent is not None and agent not in self._hooked_agents:
            agent.add_hook(self._cancel_malformed_call, BeforeToolCallEvent)
            self._hooked_agents.add(agent)

        trajectory = state.trajectory
        prompt_ids = self._prompt_ids(state, messages, tool_specs, system_prompt)
        input_ids = trajectory.token_ids + prompt_ids
        sampling_params = {"skip_special_tokens": False, **self.config.get("sampling_params", {})}
        limit = await self._context_limit()
        if limit is not None:
            # SGLang rejects prompt + max_new_tokens >= context length, so one position stays free.
            room = limit - len(input_ids) - 1
            if room <= 0:
                raise ContextWindowOverflowException(
                    f"prompt of {len(input_ids)} tokens leaves no room in the {limit}-token context window"
                )
            sampling_params["max_new_tokens"] = min(sampling_params.get("max_new_tokens") or room, room)

        return_logprob = bool(self.config.get("return_logprob", True))
        return_routed = bool(self.config.get("return_routed_experts", False))
        # Input logprobs start one token before the new prompt: SGLang reports null for the first position, and
        # prefix-cache reuse is capped at this value, so it must not be 0 on later turns. The first turn asks for
        # none (-1), which keeps the shared system prompt cacheable across rollouts.
        logprob_start = len(trajectory) - 1 if trajectory.turns else -1
        routed_start = max(0, len(trajectory) - 1)

        yield {"messageStart": {"role": "assistant"}}
        try:
            raw = await self.client.generate(
                input_ids,
                sampling_params=sampling_params,
                return_logprob=return_logprob,
                logprob_start_len=logprob_start,
                return_routed_experts=return_routed,
                routed_experts_start_len=routed_start,
                rid=uuid.uuid4().hex,
                cancel_signal=cancel_signal,
            )
        except SGLangCancelledError:
            return  # Strands reports the turn as cancelled; nothing was recorded.
        except SGLangContextLengthError as e:
            raise ContextWindowOverflowException(str(e)) from e
        except SGLangThrottledError as e:
            raise ModelThrottledException(str(e)) from e

        reply = _parse_reply(raw, input_ids, len(prompt_ids), logprob_start, return_logprob, return_routed)
        if reply.finish_reason == "abort":
            raise SGLangAbortedError(f"generation aborted by the server: {raw['meta_info']['finish_reason']}")
        text = reply.text
        try:
            turn = trajectory.append_turn(
                prompt_ids,
                reply.output_ids,
                finish_reason=reply.finish_reason,
                prompt_logprobs=reply.prompt_logprobs,
                output_logprobs=reply.output_logprobs,
                matched_stop=reply.matched_stop,
                prompt_tokens=len(input_ids),
                cached_tokens=reply.cached_tokens,
                latency_s=reply.latency_s,
                request_id=reply.request_id,
                weight_version=reply.weight_version,
                routed_experts=reply.routed_experts,
            )
        except TrajectoryError as e:
            raise SGLangResponseError(f"/generate reply cannot be recorded: {e}") from e
        state.cursor = len(messages) + 1
        state.last_output_text = text

        calls = self.tool_parser.parse(text, tool_specs) if tool_specs else []
        record_turn(
            trajectory,
            turn,
            model_id=self.config.get("model_id"),
            tool_parse_errors=[{"name": c.name, "error": c.error, "raw": c.raw} for c in calls if c.error],
            routed_experts=base64.b64decode(reply.routed_experts) if reply.routed_experts else None,
        )
        if text:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": text}}}
            yield {"contentBlockStop": {}}
        for call in calls:
            for event in self._tool_use_events(state, call):
                yield event

        stop_reason: StopReason = "end_turn"
        if reply.finish_reason == "length":
            stop_reason = "max_tokens"
        elif calls:
            stop_reason = "tool_use"
        yield {"messageStop": {"stopReason": stop_reason}}
        usage = {
            "inputTokens": len(input_ids),
            "outputTokens": len(reply.output_ids),
            "totalTokens": len(input_ids) + len(reply.output_ids),
            "cacheReadInputTokens": reply.cached_tokens,
        }
        metrics = {"latencyMs": round((reply.latency_s or 0.0) * 1000)}
        yield cast(StreamEvent, {"metadata": {"usage": usage, "metrics": metrics}})

    def _tool_use_events(self, state: _AgentState, call: ToolCall) -> list[StreamEvent]:
        name = call.name
        if call.error is not None:
            label = call.name or "unknown"
            state.tool_parse_errors[label] = state.tool_parse_errors.get(label, 0) + 1
            self._malformed_calls[call.id] = (
                f"Invalid tool call: {call.error}. The call was not executed.\nRaw tool call text: {call.raw}"
            )
            # A name no tool can have: even without the cancelling hook the call can never run with made-up input.
            name = INVALID_TOOL_NAME
        return [
            {"contentBlockStart": {"start": {"toolUse": {"toolUseId": call.id, "name": name}}}},
            {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call.input)}}}},
            {"contentBlockStop": {}},
        ]

    def _cancel_malformed_call(self, event: BeforeToolCallEvent) -> None:
        message = self._malformed_calls.pop(str(event.tool_use.get("toolUseId")), None)
        if message is not None:
            event.cancel_tool = message

    async def structured_output(
        self, output_model: type[T], prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, T | Any], None]:
        """Constrained decoding with SGLang's ``json_schema``; not part of any trajectory."""

        input_ids = self._prompts.first_prompt(prompt, None, system_prompt)
        sampling_params = {
            "skip_special_tokens": False,
            **self.config.get("sampling_params", {}),
            "json_schema": json.dumps(output_model.model_json_schema()),
        }
        try:
            raw = await self.client.generate(input_ids, sampling_params=sampling_params)
        except SGLangContextLengthError as e:
            raise ContextWindowOverflowException(str(e)) from e
        except SGLangThrottledError as e:
            raise ModelThrottledException(str(e)) from e
        reply = _parse_reply(raw, input_ids, len(input_ids), -1, False, False)
        if reply.finish_reason == "abort":
            raise SGLangAbortedError("structured output generation aborted by the server")
        yield {"output": output_model.model_validate_json(reply.text)}


def _plain_text(message: Any) -> str:
    return "".join(block["text"] for block in message["content"] if "text" in block)


def _logprob(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise SGLangResponseError(f"{where}: logprob {value!r} is not a finite number")
    return float(value)


def _logprob_entries(entries: Any, expected_ids: Sequence[int], where: str) -> list[float | None]:
    if not isinstance(entries, list) or len(entries) != len(expected_ids):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise SGLangResponseError(f"{where}: expected {len(expected_ids)} entries, got {got}")
    out: list[float | None] = []
    for i, (entry, token) in enumerate(zip(entries, expected_ids, strict=True)):
        if not isinstance(entry, list | tuple) or len(entry) < 2 or entry[1] != token:
            raise SGLangResponseError(f"{where}[{i}]: entry {entry!r} does not describe token {token}")
        out.append(_logprob(entry[0], f"{where}[{i}]"))
    return out


def _parse_reply(
    raw: dict[str, Any],
    input_ids: Sequence[int],
    new_prompt: int,
    logprob_start: int,
    want_logprobs: bool,
    want_routed: bool,
) -> _Reply:
    """Validate a ``/generate`` reply against the request before anything is recorded."""
    output_ids = raw.get("output_ids")
    meta = raw.get("meta_info")
    if not isinstance(meta, dict):
        raise SGLangResponseError("/generate reply has no meta_info object")
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict) or finish.get("type") not in ("stop", "length", "abort"):
        raise SGLangResponseError(f"/generate reply has an unknown finish_reason {finish!r}")
    finish_type = cast(FinishReason, finish["type"])
    if not isinstance(output_ids, list) or not all(type(t) is int and t >= 0 for t in output_ids):
        raise SGLangResponseError("/generate reply has no output_ids list of token ids")
    if finish_type != "abort":
        if not output_ids:
            raise SGLangResponseError("/generate reply finished without generating any token")
        prompt_tokens = meta.get("prompt_tokens")
        if prompt_tokens != len(input_ids):
            raise SGLangResponseError(f"server counted {prompt_tokens!r} prompt tokens, {len(input_ids)} were sent")

    output_logprobs = prompt_logprobs = None
    if want_logprobs and finish_type != "abort":
        output_logprobs = _logprob_entries(meta.get("output_token_logprobs"), output_ids, "output_token_logprobs")
        if logprob_start >= 0:
            entries = meta.get("input_token_logprobs")
            expected = list(input_ids[logprob_start:])
            # Keep only the new prompt tokens; the first entry (null by protocol) is an already recorded token.
            prompt_logprobs = _logprob_entries(entries, expected, "input_token_logprobs")[-new_prompt:]

    routed = None
    if want_routed and finish_type != "abort":
        routed = meta.get("routed_experts")
        if not isinstance(routed, str):
            raise SGLangResponseError(
                "routed experts were requested but the reply has none"
                " (start SGLang with --enable-return-routed-experts)"
            )

    text = raw.get("text")
    if not isinstance(text, str):
        raise SGLangResponseError("/generate reply has no text")
    latency = meta.get("e2e_latency")
    return _Reply(
        output_ids=output_ids,
        output_logprobs=output_logprobs,
        prompt_logprobs=prompt_logprobs,
        text=text,
        finish_reason=finish_type,
        matched_stop=finish.get("matched"),
        cached_tokens=int(meta.get("cached_tokens") or 0),
        completion_tokens=len(output_ids),
        latency_s=float(latency) if isinstance(latency, int | float) else None,
        request_id=meta.get("id") if isinstance(meta.get("id"), str) else None,
        weight_version=str(meta["weight_version"]) if meta.get("weight_version") is not None else None,
        routed_experts=routed,
    )
