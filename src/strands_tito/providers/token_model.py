"""The token-in/token-out machinery every strands-tito model provider shares.

:class:`TokenModel` is a Strands ``Model`` that keeps one exact token :class:`~strands_tito.trajectory.Trajectory`
per agent: it tokenizes the first prompt once and only the new messages after that (:class:`PromptEncoder`), never
re-tokenizes generated tokens, fits the request into the context window, reads tool calls strictly from the output
text (a malformed call becomes an error the model sees, never a call with made-up input), records each turn on the
current span for trace capture, and maps server failures to Strands' exceptions.

A provider subclass only says how one generation request is sent and how its reply is validated:
:meth:`TokenModel._generate` takes a :class:`GenerationRequest` and returns a checked :class:`Generation` (or raises;
both live in :mod:`~strands_tito.providers.generation`, re-exported here).
:class:`~strands_tito.providers.sglang.SGLangModel` does it with SGLang's ``/generate``,
:class:`~strands_tito.providers.vllm.VLLMModel` with vLLM's ``/inference/v1/generate`` or ``/v1/completions``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from typing import Any, ClassVar, TypeVar, cast

from pydantic import BaseModel
from strands.hooks import BeforeToolCallEvent
from strands.models.model import BaseModelConfig, Model
from strands.types.content import Messages, SystemContentBlock
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolChoice, ToolSpec
from transformers import PreTrainedTokenizerBase

from strands_tito.capture.lineage import serving_agent
from strands_tito.capture.recorder import end_trajectory, record_turn
from strands_tito.errors import (
    ContextLengthError,
    GenerationError,
    RequestCancelledError,
    ServerUnreachableError,
    ThrottledError,
)
from strands_tito.providers.client import TokenClient
from strands_tito.providers.config_keys import warn_unknown_config_keys
from strands_tito.providers.episode import (
    EpisodeState,
    HistoryConfig,
    HistoryRewrittenError,
    check_history_config,
    next_prompt,
)
from strands_tito.providers.generation import (
    Generation,
    GenerationRequest,
    TokenAbortedError,
    TokenResponseError,
    check_token_ids,
    finite_logprob,
)
from strands_tito.providers.prompt import (
    PromptEncoder,
    format_messages,
    format_tool_specs,
    message_formatter,
    shared_prompt_encoder,
)
from strands_tito.providers.reasoning import split_harmony, split_reasoning
from strands_tito.providers.rejected_call import RejectedToolCall
from strands_tito.providers.tool_parsers import (
    HermesToolParser,
    ToolCall,
    ToolParser,
    ToolParserDetectionError,
    get_tool_parser,
    warn_foreign_markup,
)
from strands_tito.providers.turn_events import tool_use_name, turn_events
from strands_tito.trajectory import Trajectory, TrajectoryError
from strands_tito.upstream import strands_sdk

__all__ = [
    "STATE_KEY",
    "Generation",
    "GenerationRequest",
    "HistoryConfig",
    "HistoryRewrittenError",
    "ImagesNotSupportedError",
    "TokenAbortedError",
    "TokenModel",
    "TokenResponseError",
    "check_token_ids",
    "finite_logprob",
]

logger = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)

#: Key of the per-agent state in the ``model_state`` Strands keeps for each agent (shared by all providers).
STATE_KEY = "strands_tito"


class ImagesNotSupportedError(GenerationError):
    """The prompt has images but the provider or the served model cannot take them; raised before any request."""


class TokenModel(Model):
    """Base of the token-in/token-out providers: per-agent trajectories, prompts, tools, limits, capture, errors.

    Each agent using the model gets its own trajectory (kept in the per-agent model state Strands passes to
    :meth:`stream`); ``model.trajectory`` is the trajectory of the agent that called the model last, which is the
    agent's when only one uses it (``token_manager`` and ``rollout`` are its supported older names). Subclasses
    implement :meth:`_generate` and set the class attributes below.
    """

    #: Sampling parameter that caps the number of generated tokens (fitted to the context window each turn).
    max_tokens_key: ClassVar[str] = "max_tokens"
    #: Positions kept free after prompt + generated tokens (SGLang rejects prompt + max_new_tokens >= context).
    reserved_positions: ClassVar[int] = 1
    #: Sampling parameters sent unless the configuration overrides them.
    default_sampling_params: ClassVar[dict[str, Any]] = {}
    #: Errors raised for an unusable reply and a server abort.
    response_error: ClassVar[type[TokenResponseError]] = TokenResponseError
    aborted_error: ClassVar[type[TokenAbortedError]] = TokenAbortedError
    #: The backend's client class: a client of another backend is refused at construction.
    client_type: ClassVar[type[TokenClient]] = TokenClient
    #: The provider's configuration ``TypedDict``: keys it does not define warn (a typo is named, not ignored).
    config_type: ClassVar[type] = BaseModelConfig

    client: TokenClient
    config: Any

    def __init__(
        self,
        *,
        tokenizer: PreTrainedTokenizerBase,
        client: TokenClient,
        tool_parser: ToolParser | str | None,
        defaults: dict[str, Any],
        config: dict[str, Any],
    ) -> None:
        if isinstance(client, TokenClient) and not isinstance(client, self.client_type):
            raise TypeError(
                f"{type(self).__name__} speaks {self.client_type.backend_name}: client= must be a "
                f"{self.client_type.__name__}, not a {type(client).__name__} ({client.backend_name}'s routes)"
            )
        self.client = client
        self.tokenizer = tokenizer
        # "auto": the parser the tokenizer's chat template and special tokens call for, or a clear error. The default
        # (None) is "auto" too, but a model whose template has no tool-call format can still serve tool-less agents:
        # the error is then raised when tools are first offered, before anything is sent.
        self._undecided_parser: ToolParserDetectionError | None = None
        if tool_parser is None:
            try:
                tool_parser = get_tool_parser("auto", tokenizer=tokenizer)
            except ToolParserDetectionError as e:
                self._undecided_parser = e
                tool_parser = HermesToolParser()  # its <think> delimiters still split reasoning from the answer
        self.tool_parser = (
            get_tool_parser(tool_parser, tokenizer=tokenizer) if isinstance(tool_parser, str) else tool_parser
        )
        self.config = dict(defaults)
        self._default_model_id = defaults.get("model_id")
        self.update_config(**config)
        self._epoch = 0
        self._default_state = EpisodeState(0)
        self._last_state = self._default_state
        self._malformed_calls: dict[str, str] = {}
        self._hooked_agents: weakref.WeakSet[Any] = weakref.WeakSet()
        self._states: weakref.WeakSet[EpisodeState] = weakref.WeakSet({self._default_state})
        #: States of calls made outside an agent's turns (kept until reset, for rollout_history).
        self._aside: list[EpisodeState] = []
        #: Finished trajectories, appended by :meth:`reset` (strands-sglang 0.6's ``rollout_history``).
        self.rollout_history: list[Trajectory] = []

    # -- to implement ----------------------------------------------------------------------------------------------

    async def _generate(self, request: GenerationRequest) -> Generation:
        """Send one generation and return the validated reply.

        Raises:
            RequestCancelledError: The cancel signal was set (nothing is recorded).
            ContextLengthError, ThrottledError: Mapped to Strands' exceptions by :meth:`stream`.
            TokenResponseError: The reply cannot be used (a subclass per provider).
        """
        raise NotImplementedError

    def _structured_output_params(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Sampling parameters that constrain the output to a JSON schema."""
        raise NotImplementedError

    async def _check_images_supported(self) -> None:
        """Raise :class:`ImagesNotSupportedError` unless this provider and its model take images (before sending)."""
        raise ImagesNotSupportedError(f"{type(self).__name__} does not send images")

    # -- configuration -------------------------------------------------------------------------------------------

    def update_config(self, **model_config: Any) -> None:
        """Update configuration keys; a key the provider's config type does not define warns (and is kept)."""
        warn_unknown_config_keys(model_config, self.config_type)
        check_history_config(model_config)
        self.config.update(model_config)
        # The encoder follows the template the model was built with (a tokenizer whose template changes later is
        # another encoder's), and is looked up again only for another thinking switch or tokenizer.
        encoder: PromptEncoder | None = getattr(self, "_prompt_encoder", None)
        if encoder is None or "enable_thinking" in model_config or encoder.tokenizer is not self.tokenizer:
            self._prompt_encoder = None
            if isinstance(self.tokenizer, PreTrainedTokenizerBase):
                self._prompt_encoder = self._prompts  # a template the encoder cannot follow fails here, not mid-rollout

    @property
    def _prompts(self) -> PromptEncoder:
        # Built on first use for a tokenizer that is not a Hugging Face one (a test double: strands-env's tests
        # build the model with a MagicMock and never render a prompt).
        if self._prompt_encoder is None:
            thinking = self.config.get("enable_thinking")
            self._prompt_encoder = shared_prompt_encoder(self.tokenizer, enable_thinking=thinking)
        return self._prompt_encoder

    def get_config(self) -> Any:
        """Return the configuration."""
        return self.config

    def format_tool_specs(self, tool_specs: Sequence[ToolSpec]) -> list[dict[str, Any]] | None:
        """The tool specs as the chat template's ``tools`` (OpenAI function form); override to change them.

        Used for each sample's first prompt (strands-sglang 0.6's extension point of the same name).
        """
        return format_tool_specs(tool_specs)

    @classmethod
    def format_messages(cls, messages: Messages, system_prompt: str | None = None) -> list[dict[str, Any]]:
        """Strands messages as the template's; override to change them (strands-sglang 0.6's extension point): called
        with all messages for a sample's first prompt, with the model's last message and the new ones for a
        continuation (its first entry is dropped). An override handles images itself."""
        return format_messages(messages, system_prompt)

    # -- trajectory access (single-agent use) ----------------------------------------------------------------------

    @property
    def trajectory(self) -> Trajectory:
        """Trajectory of the agent that used this model last (``token_ids``, ``loss_mask``, ``logprobs``, ...)."""
        return self._last_state.trajectory

    @property
    def samples(self) -> list[Trajectory]:
        """The samples of the episode of the agent that used this model last, in order.

        One sample (``[model.trajectory]``) unless the history was rewritten (``on_rewrite="new_sample"``) or a user
        turn re-rendered (``reasoning_retention="template"``); each is exact, and each generated token is in one.
        """
        return self._last_state.samples

    @property
    def token_manager(self) -> Trajectory:
        """Same as :attr:`trajectory` (the seed API's name, supported)."""
        return self._last_state.trajectory

    @property
    def rollout(self) -> Trajectory:
        """Same as :attr:`trajectory` (strands-sglang 0.6's name, supported; ``Rollout`` is :class:`Trajectory`)."""
        return self._last_state.trajectory

    @property
    def routed_experts(self) -> list[str]:
        """Per-turn base64 routed-expert slices of :attr:`trajectory`."""
        return self._last_state.trajectory.routed_experts

    @property
    def processed_messages(self) -> int:
        """How many of the agent's messages :attr:`trajectory` holds (strands-sglang 0.6's message cursor)."""
        return self._last_state.cursor

    @property
    def tool_parse_errors(self) -> dict[str, int]:
        """Malformed tool calls per tool name in :attr:`trajectory`'s episode."""
        return self._last_state.tool_parse_errors

    def trajectory_of(self, agent: Any) -> Trajectory:
        """The trajectory (current sample) of one agent that shares this model with others."""
        state = self._state_of(agent)
        return state.trajectory if state is not None else Trajectory()

    def samples_of(self, agent: Any) -> list[Trajectory]:
        """The samples of one agent's episode (see :attr:`samples`)."""
        state = self._state_of(agent)
        return state.samples if state is not None else []

    def _state_of(self, agent: Any) -> EpisodeState | None:
        state = (strands_sdk.model_state(agent) or {}).get(STATE_KEY)
        return state if isinstance(state, EpisodeState) and state.epoch == self._epoch else None

    def reset(self) -> None:
        """Start a new episode: every agent's next call starts a new trajectory (earlier ones stay as they were).

        The episode's samples are appended to :attr:`rollout_history` (agent by agent, in the order the agents first
        called the model; each agent's samples in order); it keeps every one until you clear it
        (``model.rollout_history.clear()``).
        Trajectories whose turns went out on spans get their end signal now.
        """
        states = sorted(self._states, key=lambda s: s.order)
        self.rollout_history.extend(t for s in states if s.epoch == self._epoch for t in s.samples)
        self._aside.clear()
        for state in states:
            for sample in [*state.closed, state.trajectory]:
                end_trajectory(sample, "reset")
        self._epoch += 1
        self._default_state = EpisodeState(self._epoch)
        self._last_state = self._default_state
        self._states.add(self._default_state)

    # -- Strands Model API -----------------------------------------------------------------------------------------

    def _state(self, model_state: dict[str, Any] | None) -> EpisodeState:
        if model_state is None:
            purpose = serving_agent()
            if purpose is not None:
                # Called with no agent state while an agent runs (its conversation manager's summary, a hook): a
                # trajectory of its own, one generation long, linked to the agent it served.
                state = EpisodeState(self._epoch)
                state.purpose = purpose
                self._states.add(state)
                self._aside.append(state)
                return state
            state = self._default_state
        else:
            found = model_state.get(STATE_KEY)
            state = (
                found if isinstance(found, EpisodeState) and found.epoch == self._epoch else EpisodeState(self._epoch)
            )
            model_state[STATE_KEY] = state
        if state.epoch != self._epoch:
            state = self._default_state = EpisodeState(self._epoch)
        self._states.add(state)
        return state

    def _prompt_ids(
        self,
        state: EpisodeState,
        messages: Messages,
        tool_specs: list[ToolSpec] | None,
        system_prompt: str | None,
        images: list[str],
    ) -> list[int]:
        formatter = message_formatter(self.format_messages if _overrides_format_messages(type(self)) else None)
        args = (state, self._prompts, self.config, messages, tool_specs, system_prompt, images)
        return next_prompt(*args, format_tools=self.format_tool_specs, format_messages=formatter)

    async def _context_limit(self) -> int | None:
        limit = self.config.get("context_window_limit")
        if limit:
            return cast(int, limit)
        try:
            return await self.client.max_model_len()
        except ServerUnreachableError:
            raise  # the generation would wait out the same window again
        except GenerationError as e:
            logger.warning("error=<%s> | could not read the context length; will ask again next turn", e)
            return None

    def _sampling_params(self) -> dict[str, Any]:
        return {**self.default_sampling_params, **self.config.get("sampling_params", {})}

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

        The steps: find the agent's state, build the request fitted to the context window, send it, record the turn,
        and emit Strands' events.

        Raises:
            ContextWindowOverflowException: No room is left in the context window.
            ModelThrottledException: The server stayed overloaded through every retry.
            TokenAbortedError, TokenResponseError, HistoryRewrittenError, GenerationError: see their docs (the
                first two as the provider's own subclasses).
        """
        if tool_specs and self._undecided_parser is not None:
            raise self._undecided_parser
        state = self._enter(model_state, invocation_state)
        # Only the new messages' images are encoded (once); the earlier ones are kept on the trajectory.
        new_images: list[str] = []
        request, prompt_ids = await self._turn_request(
            state, messages, tool_specs, system_prompt, new_images, cancel_signal
        )
        yield {"messageStart": {"role": "assistant"}}
        reply = await self._send(request)
        if reply is None:
            return  # Strands reports the turn as cancelled; nothing was recorded.
        calls, reasoning, answer = self._record(state, messages, tool_specs, request, prompt_ids, new_images, reply)
        for event in turn_events(reply, len(request.input_ids), calls, reasoning, answer):
            yield event

    def _enter(self, model_state: dict[str, Any] | None, invocation_state: dict[str, Any] | None) -> EpisodeState:
        """The calling agent's state (now :attr:`trajectory`); hooks the agent once to cancel malformed calls."""
        state = self._state(model_state)
        self._last_state = state
        state.note_agent(agent := (invocation_state or {}).get("agent"))
        if agent is not None and agent not in self._hooked_agents:
            agent.add_hook(self._reject_malformed_call, BeforeToolCallEvent)
            self._hooked_agents.add(agent)
        return state

    async def _turn_request(  # noqa: PLR0917  the turn's state as stream() holds it, handed on once
        self,
        state: EpisodeState,
        messages: Messages,
        tool_specs: list[ToolSpec] | None,
        system_prompt: str | None,
        new_images: list[str],
        cancel_signal: threading.Event | None,
    ) -> tuple[GenerationRequest, list[int]]:
        """The turn's request (its token cap fitted to the context window) and its new prompt tokens."""
        prompt_ids = self._prompt_ids(state, messages, tool_specs, system_prompt, new_images)
        trajectory = state.trajectory  # a new sample when the prompt started one
        image_data = [*trajectory.image_data, *new_images]
        if image_data:
            await self._check_images_supported()
        input_ids = trajectory.prompt_ids(prompt_ids)
        sampling_params = self._sampling_params()
        limit = await self._context_limit()
        if limit is not None:
            room = limit - len(input_ids) - self.reserved_positions
            if room <= 0:
                raise ContextWindowOverflowException(
                    f"prompt of {len(input_ids)} tokens leaves no room in the {limit}-token context window"
                )
            key = self.max_tokens_key
            sampling_params[key] = min(sampling_params.get(key) or room, room)
        request = GenerationRequest(
            input_ids=input_ids,
            input_ids_json=trajectory.input_ids_json(prompt_ids),
            new_prompt=len(prompt_ids),
            recorded=len(trajectory),
            sampling_params=sampling_params,
            # Every turn of a trajectory records logprobs or none does: refused before anything is sent.
            return_logprob=trajectory.expect_logprobs(bool(self.config.get("return_logprob", True))),
            cancel_signal=cancel_signal,
            image_data=image_data,
        )
        return request, prompt_ids

    async def _send(self, request: GenerationRequest) -> Generation | None:
        """The reply (a server abort sent again if ``client.retry.retry_aborted``), None if the caller cancelled."""
        policy = self.client.retry
        attempt = 0
        while True:
            try:
                reply = await self._generate(request)
            except RequestCancelledError:
                return None
            except ContextLengthError as e:
                raise ContextWindowOverflowException(str(e)) from e
            except ThrottledError as e:
                raise ModelThrottledException(str(e)) from e
            if reply.finish_reason != "abort" or not policy.retry_aborted or attempt >= policy.max_retries:
                return reply
            logger.warning(
                "attempt=<%d> | %s aborted the generation; sending it again", attempt + 1, self.client.backend_name
            )
            await asyncio.sleep(policy.delay(attempt))
            attempt += 1

    def _record(  # noqa: PLR0917  the turn's state as stream() holds it, handed on once
        self,
        state: EpisodeState,
        messages: Messages,
        tool_specs: list[ToolSpec] | None,
        request: GenerationRequest,
        prompt_ids: list[int],
        new_images: list[str],
        reply: Generation,
    ) -> tuple[list[ToolCall], str, str]:
        """Append the turn to the trajectory, put it on the current span; return its tool calls, reasoning, answer."""
        if reply.finish_reason == "abort":
            raise self.aborted_error(f"generation aborted by the server: {reply.aborted}")
        trajectory, text = state.trajectory, reply.text
        try:
            turn = trajectory.append_turn(
                prompt_ids,
                reply.output_ids,
                finish_reason=reply.finish_reason,
                prompt_logprobs=reply.prompt_logprobs,
                output_logprobs=reply.output_logprobs,
                matched_stop=reply.matched_stop,
                prompt_tokens=len(request.input_ids),
                cached_tokens=reply.cached_tokens,
                latency_s=reply.latency_s,
                request_id=reply.request_id,
                weight_version=reply.weight_version,
                weight_versions=reply.weight_versions,
                routed_experts=reply.routed_experts,
                routed_experts_layout=reply.routed_experts_layout,
                top_p=reply.top_p,
                image_data=new_images,
                image_token_id=self._image_token_id() if request.image_data else None,
            )
        except TrajectoryError as e:
            raise self.response_error(f"{reply.source} reply cannot be recorded: {e}") from e
        state.hold(messages)
        parser = self.tool_parser
        if parser.name == "gpt_oss":  # harmony: analysis messages are the reasoning, final messages the answer
            reasoning, answer = split_harmony(text)
        else:
            reasoning, answer = split_reasoning(text, parser.think_start, parser.think_end)
        state.last_output_text = answer

        calls = self.tool_parser.parse(text, tool_specs) if tool_specs else []
        warn_foreign_markup(self.tool_parser, text)
        self._hold_malformed(state, calls)
        record_turn(
            trajectory,
            turn,
            image_token_id=self._image_token_id() if turn.image_data else None,
            model_id=self._recorded_model_id(),
            tool_parse_errors=[{"name": c.name, "error": c.error, "raw": c.raw} for c in calls if c.error],
            agent=state,
        )
        return calls, reasoning, answer

    def _recorded_model_id(self) -> str | None:
        """The model_id the user set; left at the provider's default (SGLang's is just "sglang"), the model the server
        serves where it named one (``GET /v1/models``)."""
        model_id = self.config.get("model_id")
        if model_id in (None, "", self._default_model_id) and self.client.served_model is not None:
            return self.client.served_model
        return None if model_id is None else str(model_id)

    def _image_token_id(self) -> int | None:
        token = self._prompts.image_token
        return None if token is None else self._prompts.token_id(token)

    def _hold_malformed(self, state: EpisodeState, calls: list[ToolCall]) -> None:
        """Count the turn's malformed calls under the names they are reported with, and keep each one's error for
        the agent's hook, which cancels the call before it runs (the model sees why)."""
        for call in calls:
            if call.error is not None:
                name = tool_use_name(call)
                state.tool_parse_errors[name] = state.tool_parse_errors.get(name, 0) + 1
                self._malformed_calls[call.id] = (
                    f"Invalid tool call: {call.error}. The call was not executed.\nRaw tool call text: {call.raw}"
                )

    def _reject_malformed_call(self, event: BeforeToolCallEvent) -> None:
        message = self._malformed_calls.pop(str(event.tool_use.get("toolUseId")), None)
        if message is not None:
            # Stands in for the tool, so Strands records a failed call of it (its per-tool metrics, which
            # strands-env reads) while nothing of the tool runs.
            event.selected_tool = RejectedToolCall(event.tool_use["name"], message)

    async def structured_output(
        self, output_model: type[T], prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, T | Any], None]:
        """Constrained decoding to the output model's JSON schema; not part of any trajectory."""

        images: list[str] = []
        input_ids = self._prompts.first_prompt(prompt, None, system_prompt, images)
        if images:
            await self._check_images_supported()
        sampling_params = {
            **self._sampling_params(),
            **self._structured_output_params(output_model.model_json_schema()),
        }
        request = GenerationRequest(
            input_ids=input_ids,
            new_prompt=len(input_ids),
            recorded=0,
            sampling_params=sampling_params,
            return_logprob=False,
            record=False,
            image_data=images,
        )
        reply = await self._send(request)
        if reply is None or reply.finish_reason == "abort":
            raise self.aborted_error("structured output generation aborted by the server")
        yield {"output": output_model.model_validate_json(reply.text)}


@functools.cache
def _overrides_format_messages(cls: type[TokenModel]) -> bool:
    """Whether a provider class overrides :meth:`TokenModel.format_messages` (asked once per class)."""
    return inspect.getattr_static(cls, "format_messages") is not TokenModel.__dict__["format_messages"]
