"""An agent's episode as an ordered list of exact samples, and where each turn's prompt goes.

Token-in/token-out extends one token sequence turn by turn, which needs an append-only history. When the messages
Strands passes no longer extend what the current sample holds (a conversation manager trimmed or summarized them, or
the history was edited), or a new user turn must be exactly the chat template's rendering (``reasoning_retention``),
the current sample is closed as it stands and the conversation, rendered whole, is the next sample's prompt. Each
sample stays exact (its tokens are what the engine received and produced) and each generated token is in one sample.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict, get_args, get_type_hints

from strands.types.content import ContentBlock, Messages
from strands.types.tools import ToolSpec

from strands_tito.capture.deferred import call_when_released
from strands_tito.capture.recorder import AgentState, end_trajectory
from strands_tito.errors import GenerationError
from strands_tito.providers.prompt import MessageFormatter, PromptEncoder, format_messages, format_tool_specs
from strands_tito.trajectory import Trajectory

__all__ = ["EpisodeState", "HistoryConfig", "HistoryRewrittenError", "check_history_config", "next_prompt"]

#: Turns Strands tool specs into the chat template's ``tools`` (the model's :meth:`format_tool_specs`).
ToolFormatter = Callable[[Sequence[ToolSpec]], list[dict[str, Any]] | None]
#: Creation order of per-agent states (``rollout_history`` keeps finished samples in that order).
_STATE_ORDER = itertools.count()


class HistoryRewrittenError(GenerationError):
    """Messages the trajectory already holds were removed or changed (e.g. by a trimming conversation manager),
    and the model's ``on_rewrite`` policy is ``"raise"`` (the default, ``"new_sample"``, starts a new sample)."""


class HistoryConfig(TypedDict, total=False):
    """Configuration keys of every token-in/token-out provider for histories that are not append-only.

    Attributes:
        on_rewrite: What happens when the messages Strands passes no longer extend what the current sample holds (a
            ``SlidingWindowConversationManager`` trimmed them, a ``SummarizingConversationManager`` summarized them,
            or the history was edited). ``"new_sample"`` (default): the current sample is closed as it stands (it
            stays exact and complete) and the rewritten conversation, rendered whole with the chat template, is the
            next sample's prompt; the episode goes on as a list of samples (``model.samples``). ``"raise"``:
            :class:`HistoryRewrittenError` (the only behaviour of earlier versions).
        reasoning_retention: ``"keep"`` (default): reasoning stays in the context as generated, and a new user turn
            extends the sample. ``"template"``: each new user turn's request is exactly the chat template's rendering
            of the conversation; where the template drops earlier reasoning (Qwen3, QwQ, Qwen3.5, ...) that rendering
            no longer extends the sample, so a new sample starts there. Within a user turn (the tool loop) both are
            incremental.
    """

    on_rewrite: Literal["new_sample", "raise"]
    reasoning_retention: Literal["keep", "template"]


_POLICIES: dict[str, tuple[str, ...]] = {key: get_args(hint) for key, hint in get_type_hints(HistoryConfig).items()}


def check_history_config(config: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the allowed values when a :class:`HistoryConfig` key has another value."""
    for key, allowed in _POLICIES.items():
        if key in config and config[key] not in allowed:
            raise ValueError(f"{key} must be one of {list(allowed)}, got {config[key]!r}")


class EpisodeState(AgentState):
    """One agent's episode with a token-in/token-out model: its samples, the current one being :attr:`trajectory`
    (see :class:`~strands_tito.capture.AgentState`)."""

    trajectory: Trajectory

    def __init__(self, epoch: int) -> None:
        super().__init__(Trajectory())
        self.epoch = epoch
        self.order = next(_STATE_ORDER)
        self.cursor = 0
        self.last_output_text: str | None = None
        self.tool_parse_errors: dict[str, int] = {}
        #: The episode's closed samples, in order (the current one is :attr:`trajectory`).
        self.closed: list[Trajectory] = []
        #: Copies of the role and content of the messages the current sample holds (all but the model's last).
        self.held: list[tuple[str, list[ContentBlock]]] = []

    @property
    def samples(self) -> list[Trajectory]:
        """The episode's samples in order: the closed ones, then the current one if it has a turn."""
        return [*self.closed, self.trajectory] if self.trajectory.turns else list(self.closed)

    def holds(self, messages: Messages) -> bool:
        """Whether ``messages`` extend what the current sample holds: the same messages, then the model's output."""
        cursor = self.cursor
        previous = messages[cursor - 1] if 0 < cursor <= len(messages) else None
        if previous is None or previous["role"] != "assistant" or _plain_text(previous) != self.last_output_text:
            return False
        # Role and content only: Strands adds metadata (tracking ids) to messages it already passed.
        held = zip(messages[: len(self.held)], self.held, strict=True)
        return all(m["role"] == role and m["content"] == content for m, (role, content) in held)

    def hold(self, messages: Messages) -> None:
        """Remember the messages of a recorded turn (copying only those not held yet; a turn stays incremental)."""
        self.held.extend((m["role"], _snapshot(m["content"])) for m in messages[len(self.held) :])
        self.cursor = len(messages) + 1

    @property
    def sample_index(self) -> int:
        """Which sample of the episode :attr:`trajectory` is."""
        return len(self.closed)

    def close_sample(self) -> None:
        """Close the current sample as it stands and start an empty one.

        The closed sample's end signal goes out with the others' when the episode ends (``reset``, the agent
        released, exit), so an episode reward reaches it too.
        """
        self.closed.append(self.trajectory)
        self.trajectory = Trajectory()
        call_when_released(self, end_trajectory, self.trajectory, "released")  # as for the first sample
        self.cursor = 0
        self.last_output_text = None
        self.held = []


def next_prompt(  # noqa: PLR0917  the turn's inputs as the provider holds them, in one call
    state: EpisodeState,
    prompts: PromptEncoder,
    config: Mapping[str, Any],
    messages: Messages,
    tool_specs: list[ToolSpec] | None,
    system_prompt: str | None,
    images: list[str],
    *,
    format_tools: ToolFormatter = format_tool_specs,
    format_messages: MessageFormatter = format_messages,
) -> list[int]:
    """The turn's new prompt tokens (``images`` collects their images' data URLs), after which the engine gets
    ``state.trajectory``'s tokens and them: a continuation of the current sample, or the whole conversation as the
    prompt of a new sample where the ``config``'s :class:`HistoryConfig` policies say so.

    Raises:
        HistoryRewrittenError: The history was rewritten and ``on_rewrite`` is ``"raise"``.
        PromptError: The messages cannot be rendered.
    """
    if not state.trajectory.turns:
        return prompts.first_prompt(
            messages, tool_specs, system_prompt, images, format_tools=format_tools, format_messages=format_messages
        )
    if not state.holds(messages):
        if config.get("on_rewrite", "new_sample") == "raise":
            raise HistoryRewrittenError(
                f"the agent's history no longer holds what the trajectory holds ({state.cursor} messages then, "
                f"{len(messages)} now); on_rewrite='new_sample' starts a new sample instead"
            )
        state.close_sample()
        return prompts.first_prompt(
            messages, tool_specs, system_prompt, images, format_tools=format_tools, format_messages=format_messages
        )
    cursor = state.cursor
    if config.get("reasoning_retention") == "template" and any(
        m["role"] == "user" and not any("toolResult" in b for b in m["content"]) for m in messages[cursor:]
    ):
        return _template_turn(
            state, prompts, messages, tool_specs, system_prompt, images, format_tools, format_messages
        )
    # Only templates that number calls themselves (Kimi-K2) need the count; it walks the whole history.
    earlier = (
        sum(1 for m in messages[: cursor - 1] if m["role"] == "assistant" for b in m["content"] if "toolUse" in b)
        if prompts.numbers_calls
        else 0
    )
    return prompts.continuation(
        messages[cursor:],
        messages[cursor - 1],
        state.trajectory.token_ids,
        earlier_calls=earlier,
        images=images,
        format_messages=format_messages,
    )


def _template_turn(  # noqa: PLR0917  next_prompt's inputs handed on in its order
    state: EpisodeState,
    prompts: PromptEncoder,
    messages: Messages,
    tool_specs: list[ToolSpec] | None,
    system_prompt: str | None,
    images: list[str],
    format_tools: ToolFormatter,
    format_messages: MessageFormatter,
) -> list[int]:
    """A new user turn under ``reasoning_retention="template"``: the template's rendering of the whole
    conversation, appended to the sample where it extends it, else the prompt of a new sample."""
    rendered: list[str] = []
    whole = prompts.first_prompt(
        messages, tool_specs, system_prompt, rendered, format_tools=format_tools, format_messages=format_messages
    )
    held = state.trajectory.token_ids
    if len(whole) > len(held) and whole[: len(held)] == held:
        images.extend(rendered[len(state.trajectory.images) :])
        return whole[len(held) :]
    state.close_sample()
    images.extend(rendered)
    return whole


#: Values a snapshot shares with the message instead of copying: nothing can change them in place.
_IMMUTABLE = (str, int, float, bool, bytes, type(None))


def _snapshot(value: Any) -> Any:
    """A copy of message content that an in-place edit of the message cannot change, equal to it until then.

    What ``copy.deepcopy`` gives for the JSON-like values Strands' messages hold, several times cheaper: dicts and
    lists are copied, immutable values shared; anything else is deep-copied.
    """
    if isinstance(value, dict):
        return {k: v if type(v) in _IMMUTABLE else _snapshot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [v if type(v) in _IMMUTABLE else _snapshot(v) for v in value]
    if type(value) in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


def _plain_text(message: Any) -> str:
    return "".join(block["text"] for block in message["content"] if "text" in block)
