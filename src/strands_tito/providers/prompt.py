"""Prompt tokenization: the whole chat template once, then only the messages that are new.

Generated tokens are never re-tokenized, and the model's own stop token stays in the trajectory as generated.
After the first turn, the new messages (tool results, user turns) are rendered with the chat template after a
short stand-in tail: a system and user message, then the model's last assistant message in structured form (its
tool calls with the model's call ids and names, its content replaced by a marker). The template's rendering of the
assistant's end of turn is found after the marker: the stop token the model emitted (or, where the template writes
another one, the template's own end-of-turn token), and only the text after it is encoded and appended. So a
template that renders the last assistant message differently (Qwen3's empty think block), needs the assistant's
``tool_calls`` before a tool message (gpt-oss), names the tool or call id in the result header (gpt-oss, Kimi-K2) or
starts the tool message with the model's stop token (GLM's ``<|observation|>``) gives the same tokens as rendering
the whole structured conversation, at a cost proportional to the new messages.

Templates that list no tools (DeepSeek-V3.1) get the tool schemas in the system message instead
(:func:`tools_system_text`). A call's arguments reach the template in the form it expects, found when the encoder is
built: a mapping, or JSON text where the template concatenates them as a string (DeepSeek-V3.1's original). Each
encoder checks its template on probe conversations when it is built, so a template the encoder cannot follow fails
then, with the behaviour named, never mid-episode.

Models built on one tokenizer share one encoder per chat template and thinking switch (:func:`shared_prompt_encoder`):
its probes run once, not once per model (RL rollouts build a model per episode), and the rendered system prompt and
tools of a first prompt are encoded once per encoder, not once per agent. An encoder renders the template text it was
built with, so a tokenizer whose template is changed later gets another encoder and never mixes the two.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final

import tokenizers
from strands.types.content import Message, Messages
from strands.types.tools import ToolSpec
from transformers import PreTrainedTokenizerBase

from strands_tito.providers.families import FAMILIES, generation_prompt_ending, template_defaults
from strands_tito.providers.messages import (
    MessageFormatter,
    PromptError,
    call_arguments,
    format_messages,
    format_tool_specs,
    message_formatter,
    tool_calls_of,
    tools_system_text,
    with_history_calls,
)
from strands_tito.providers.rendering import render_chat_template

__all__ = [
    "KNOWN_END_TOKENS",
    "KNOWN_IMAGE_TOKENS",
    "MessageFormatter",
    "PromptEncoder",
    "PromptError",
    "format_messages",
    "format_tool_specs",
    "message_formatter",
    "shared_prompt_encoder",
    "tool_calls_of",
    "tools_system_text",
]

# Templates known to write a tool result inside the model's turn, by a mark written before the result.
_WRITES_INTO_THE_TURN: Final = {"<|tool_response>": "Gemma-4"}

# The stand-in messages before the assistant message the new messages follow: templates that need a user query
# before tool messages, or look at the previous message's role, then render the new messages as in a real
# conversation. Templates that refuse a system message (Gemma-2) get the user message alone.
_STAND_IN_SYSTEM: Final = "tito-stand-in-system"
_STAND_INS: Final[tuple[list[dict[str, Any]], ...]] = (
    [{"role": "system", "content": _STAND_IN_SYSTEM}, {"role": "user", "content": "U"}],
    [{"role": "user", "content": "U"}],
)
_MARK: Final = "\u2063tito-assistant-content\u2063"
_PROBE_TOOL: Final = "tito_probe_tool"
# Nine letters or digits, like every probe call id: Mistral's templates refuse any other id.
_PROBE_CALL_ID: Final = "call00000"
_PROBE_RESULT: Final = "tito-probe-result"
_PROBE_USER: Final = "tito-probe-user"
#: Every stop and end-of-turn token of the known families; the ones the tokenizer has are end-of-turn candidates.
KNOWN_END_TOKENS: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(t for f in FAMILIES.values() for t in (*f.stop_tokens, *f.end_of_turn))
)


#: Image placeholder tokens of vision-language chat templates (one per image; the server expands it): Qwen-VL and
#: Qwen3.5, LLaVA-style, Llama-3.2-Vision, Gemma-3, Pixtral/Mistral, Kimi-VL.
KNOWN_IMAGE_TOKENS: Final[tuple[str, ...]] = (
    "<|image_pad|>",
    "<image>",
    "<|image|>",
    "<start_of_image>",
    "[IMG]",
    "<|media_pad|>",
)


def _probe_call(json_text: bool) -> dict[str, Any]:
    arguments = call_arguments({"a": 1}, json_text)
    return {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": _PROBE_TOOL, "arguments": arguments}}


def _probe_tools() -> list[dict[str, Any]]:
    # A well-formed empty schema: templates read its "properties" (Seed-OSS lists tools as Python signatures).
    parameters = {"type": "object", "properties": {}}
    return [{"type": "function", "function": {"name": _PROBE_TOOL, "description": "", "parameters": parameters}}]


class PromptEncoder:
    """Encodes prompts for one tokenizer and chat template.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        enable_thinking: Passed to the template (Qwen3, GLM, DeepSeek-V3.1 ...); None leaves the template's default,
            or the family's (:func:`strands_tito.providers.families.template_defaults`: QwQ is rendered with ``True``).
            A template that reads no ``enable_thinking`` but a ``thinking`` switch (DeepSeek-V3.1's original) gets
            it under that name.
        end_tokens: Tokens that end an assistant turn (the model's stop tokens and the template's end-of-turn
            tokens). Default: the tokenizer's eos token, the token the template closes an assistant message with,
            and those of :data:`KNOWN_END_TOKENS` the tokenizer has as added tokens.

    Raises:
        PromptError: The template cannot be followed incrementally; the message names the behaviour.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        enable_thinking: bool | None = None,
        end_tokens: Sequence[str] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        # The template text this encoder follows, rendered whatever the tokenizer's template becomes later (a named
        # template set, a dict, is left to transformers' choice by the tools, as before).
        template = tokenizer.chat_template
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.template_kwargs: dict[str, Any] = (
            template_defaults(tokenizer.chat_template)
            if enable_thinking is None
            else {_thinking_switch(tokenizer.chat_template): enable_thinking}
        )
        self._generation_prompt = generation_prompt_ending(tokenizer.chat_template)
        self._added: dict[int, str] = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
        backend = getattr(tokenizer, "backend_tokenizer", None)
        split_special = getattr(tokenizer, "split_special_tokens", False)
        self._backend = backend if isinstance(backend, tokenizers.Tokenizer) and not split_special else None
        self._stand_in, self._stand_in_tools, self._stand_in_text = self._choose_stand_in()
        # The encoded system prompt and tools of first prompts, by (system prompt, tools): (text, ids), or None where
        # the text cannot be cut there (checked on the first prompt that brings them, see _encode_first).
        self._prefixes: OrderedDict[tuple[str, str], tuple[str, list[int]] | None] = OrderedDict()
        self._prefix_lock = threading.Lock()
        self.end_tokens: tuple[str, ...] = tuple(end_tokens) if end_tokens is not None else self._default_end_tokens()
        if not self.end_tokens:
            raise PromptError("no end-of-turn token: the tokenizer has no eos token and the template closes none")
        self._end_ids = {i for i, text in self._added.items() if text in self.end_tokens}
        self.tools_in_template = self._lists_tools()
        #: The template wants a call's arguments as JSON text, not a mapping (found when the encoder is built).
        self.json_arguments = self._wants_json_arguments()
        self.numbers_calls = False
        #: Why the template cannot serve an agent with tools, None where it can: a template with no tool support (it
        #: lists no tools, writes no tool calls and does not render a tool round: Gemma-2, Phi-3.5) still serves
        #: agents without tools; offering it tools raises :class:`PromptError` with this reason, before anything is
        #: sent.
        self.tools_unsupported: str | None = None
        #: Why a new user turn cannot be appended, None where it can: templates that write the system message into
        #: the last user message (Mistral-Nemo's) re-render the conversation before it differently once another user
        #: message follows. :class:`PromptError` names this when a second user turn comes.
        self.user_turns_unsupported: str | None = None
        self._probe()

    # -- rendering -------------------------------------------------------------------------------------------------

    def render(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool
    ) -> str:
        """Render messages with the chat template to text (list-changing templates too, see :mod:`.rendering`).

        Where the template ends a generation prompt differently from the model's own encoder, the encoder's ending
        is written (:func:`strands_tito.providers.families.generation_prompt_ending`: DeepSeek-V3.2 with thinking off).
        """
        text = render_chat_template(
            self.tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
            **self.template_kwargs,
        )
        if add_generation_prompt and self._generation_prompt is not None:
            written, trained = self._generation_prompt
            if text.endswith(written):
                text = text.removesuffix(written) + trained
        return text

    def encode(self, text: str) -> list[int]:
        """Encode text with no extra special tokens (the template already placed them).

        A fast tokenizer's Rust backend is called directly: the same ids as ``tokenizer.encode(text,
        add_special_tokens=False)`` (tested), without the wrapper's batch and padding set-up, which costs more than
        encoding the few new tokens of a turn. Its ``encode_batch_fast`` skips the character offsets that ``encode``
        computes and nothing here reads: 12-22% less CPU, which is most of a turn that brings in a long tool result.
        (Like every batch call of ``tokenizers``, it may run on the library's thread pool; ``TOKENIZERS_PARALLELISM``
        governs that.) Only while the backend pads, truncates or splits special tokens (settings ``tokenizer.encode``
        would change first) does the wrapper encode.
        """
        backend = self._backend
        if backend is not None and not (backend.encode_special_tokens or backend.truncation or backend.padding):
            ids: list[int] = backend.encode_batch_fast([text], add_special_tokens=False)[0].ids
            return ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _render_or_fail(self, messages: list[dict[str, Any]], what: str, *, generation: bool) -> str:
        try:
            return self._render_tail(messages, generation=generation)
        except PromptError:
            raise
        except Exception as e:
            raise PromptError(f"the chat template cannot {what}: {type(e).__name__}: {e}") from e

    def _render_tail(self, messages: list[dict[str, Any]], *, generation: bool) -> str:
        """Render a stand-in conversation, with the stand-in tools list where the template needs one."""
        return self.render(messages, tools=self._stand_in_tools, add_generation_prompt=generation)

    def _choose_stand_in(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, str]:
        """The stand-in messages, the tools list they are rendered with (None, or a probe tool where the template
        needs a list: Hermes-2-Pro's and Hermes-3's ``tool_use`` templates iterate ``tools`` unguarded) and their
        rendering: the first the template renders of a system and a user message, then the user message alone."""
        first: Exception | None = None
        for tools in (None, _probe_tools()):
            for stand_in in _STAND_INS:
                try:
                    text = self.render(stand_in, tools=tools, add_generation_prompt=False)
                except Exception as e:
                    first = first or e
                    continue
                return stand_in, tools, text
        raise PromptError(
            f"the chat template cannot render a system and a user message: {type(first).__name__}: {first}"
        ) from first

    # -- construction-time checks ----------------------------------------------------------------------------------

    def _default_end_tokens(self) -> tuple[str, ...]:
        found: list[str] = []
        eos = self.tokenizer.eos_token
        if isinstance(eos, str) and eos:
            found.append(eos)
        closed = self._render_or_fail(
            [*self._stand_in, {"role": "assistant", "content": _MARK}, {"role": "user", "content": _PROBE_USER}],
            "render a user message after an assistant message",
            generation=True,
        )
        if _MARK not in closed:
            raise PromptError("the chat template does not render assistant content verbatim")
        # The first added token after the content is the template's end of an assistant turn (<|im_end|>, <|eot_id|>,
        # GLM's <|user|> ...).
        ids = self.encode(closed.split(_MARK, 1)[1])
        first = next((self._added[i] for i in ids if i in self._added), None)
        if first is not None:
            found.append(first)
        vocabulary = set(self._added.values())
        found.extend(t for t in KNOWN_END_TOKENS if t in vocabulary)
        return tuple(dict.fromkeys(found))

    def _lists_tools(self) -> bool:
        try:
            text = self.render(self._stand_in, tools=_probe_tools(), add_generation_prompt=True)
        except Exception as e:
            raise PromptError(f"the chat template cannot render a tools list: {type(e).__name__}: {e}") from e
        return _PROBE_TOOL in text

    def _wants_json_arguments(self) -> bool:
        """Whether the template takes a call's arguments as JSON text rather than a mapping.

        A mapping is the default; JSON text only where the template refuses a mapping or writes it as a Python
        ``dict`` (it concatenates the arguments as a string: DeepSeek-V3.1's original). A template that takes either
        form (``tojson`` for a mapping, a string verbatim) renders both the same.
        """

        def rendered(json_text: bool) -> str | None:
            assistant = {"role": "assistant", "content": _MARK, "tool_calls": [_probe_call(json_text)]}
            try:
                return self._render_tail([*self._stand_in, assistant], generation=False)
            except Exception:
                return None

        as_mapping = rendered(False)
        if as_mapping is not None and "{'a': 1}" not in as_mapping:
            return False
        return rendered(True) is not None

    def _probe(self) -> None:
        """Follow one tool round and one new user turn the way an episode would, or fail naming the behaviour."""
        call: Any = {"toolUse": {"toolUseId": _PROBE_CALL_ID, "name": _PROBE_TOOL, "input": {"a": 1}}}
        calling: Message = {"role": "assistant", "content": [{"text": "x"}, call]}
        answering: Message = {"role": "assistant", "content": [{"text": "x"}]}
        result: Any = {
            "toolResult": {"toolUseId": _PROBE_CALL_ID, "status": "success", "content": [{"text": _PROBE_RESULT}]}
        }
        results: Message = {"role": "user", "content": [result]}
        question: Message = {"role": "user", "content": [{"text": _PROBE_USER}]}
        stop = self.encode(self.end_tokens[0])
        for previous, new, expected, behaviour in (
            (calling, results, _PROBE_RESULT, "a tool result after an assistant tool call"),
            (answering, question, _PROBE_USER, "a user message after an answer"),
        ):
            try:
                ids = self.continuation([new], previous, stop, behaviour=behaviour)
                written = str(self.tokenizer.decode(ids, skip_special_tokens=False))
                if previous is answering and _STAND_IN_SYSTEM in written:
                    self.user_turns_unsupported = (
                        "the chat template writes the system message into the last user message, so a new user turn "
                        "changes how the conversation before it is rendered and cannot be appended token-in/token-out; "
                        "start a new episode per user query, or set reasoning_retention='template' to render each "
                        "user turn's whole conversation (a new sample where it differs)"
                    )
                if expected not in written:
                    raise PromptError(
                        f"the chat template does not render {behaviour} in the text after the stop token"
                        + self._inside_the_turn(previous, new, expected)
                    )
            except PromptError as e:
                if previous is answering or not self._has_no_tool_support():
                    raise
                self.tools_unsupported = (
                    f"{e}; it lists no tools and writes no tool calls either, so it serves agents without tools only"
                )
        if self.tools_unsupported is not None:
            return
        # Templates that number the calls of the whole conversation themselves and write that number into the result
        # header (the llama.cpp copies of Kimi-K2-Instruct/-Thinking: "## Return of functions.N:IDX") need the earlier
        # calls in the stand-in tail; the others render the same without them.
        first = self.continuation([results], calling, stop, behaviour="a tool result after an assistant tool call")
        self.numbers_calls = True
        try:
            later = self.continuation(
                [results], calling, stop, earlier_calls=1, behaviour="a tool result after earlier tool calls"
            )
        except PromptError:
            # The stand-in history with earlier calls is not one the template accepts (Ministral-3 wants strictly
            # alternating roles): it numbers nothing from there, and episodes never render that history.
            later = first
        # (Templates that drop the content of a message with calls, Llama-3.x, are found from the bare stand-in's end,
        # so they never get the earlier calls; their result headers carry no numbers.)
        self.numbers_calls = first != later and _MARK in self._render_tail(
            [
                *self._stand_in,
                {
                    "role": "assistant",
                    "content": _MARK,
                    "tool_calls": tool_calls_of(calling, json_text=self.json_arguments),
                },
            ],
            generation=False,
        )

    def _has_no_tool_support(self) -> bool:
        """Whether the template lists no tools and renders an assistant's tool call without writing it (Gemma-2,
        Phi-3.5): a template that writes calls but cannot follow a tool round is refused instead."""
        if self.tools_in_template:
            return False
        assistant = {"role": "assistant", "content": _MARK, "tool_calls": [_probe_call(self.json_arguments)]}
        try:
            text = self._render_tail([*self._stand_in, assistant], generation=False)
        except Exception:
            return False
        return _PROBE_TOOL not in text

    def _inside_the_turn(self, previous: Message, new: Message, expected: str) -> str:
        """Why, when the template writes the new message inside the model's own turn (Gemma-4's tool results)."""
        calls = tool_calls_of(previous, json_text=self.json_arguments)
        assistant = {"role": "assistant", "content": _MARK, **({"tool_calls": calls} if calls else {})}
        text = self._render_tail([*self._stand_in, assistant, *format_messages([previous, new])[1:]], generation=True)
        # After the stand-in: Gemma-4 writes the assistant's content after its calls and their results.
        after = text.removeprefix(self._stand_in_text)
        position = after.find(expected)
        ends = [p for t in self.end_tokens if (p := after.find(t)) != -1]
        if position == -1 or (ends and min(ends) < position):
            return ""
        family = next((name for mark, name in _WRITES_INTO_THE_TURN.items() if mark in after[:position]), None)
        return (
            f": it writes it inside the model's own turn, with no end-of-turn token before it ({after[:position]!r})"
            + (f", as {family}'s template does" if family else "")
            + "; token-in/token-out appends new messages only after the token that ends the model's turn, so this "
            "template cannot be served"
        )

    # -- images ----------------------------------------------------------------------------------------------------

    @property
    def image_token(self) -> str | None:
        """The placeholder token the template renders for one image (``<|image_pad|>`` ...), None if it renders none.

        Found once, on first use, by rendering a user message and a tool result with an image part.
        """
        if not hasattr(self, "_image_token"):
            self._image_token = self._find_image_token()
        return self._image_token

    def token_id(self, token: str) -> int:
        """The id of one of the tokenizer's added tokens."""
        return next(i for i, text in self._added.items() if text == token)

    def _find_image_token(self) -> str | None:
        image: dict[str, Any] = {"type": "image"}
        probes = (
            [*self._stand_in[:-1], {"role": "user", "content": [image, {"type": "text", "text": _PROBE_USER}]}],
            [
                *self._stand_in,
                {"role": "assistant", "content": "x", "tool_calls": [_probe_call(self.json_arguments)]},
                {"role": "tool", "tool_call_id": _PROBE_CALL_ID, "name": _PROBE_TOOL, "content": [image]},
            ],
        )
        found: set[str] = set()
        for messages in probes:
            try:
                text = self._render_tail(messages, generation=True)
            except Exception:
                return None  # a text-only template (content must be a string)
            ids = self.encode(text)
            tokens = {self._added[i] for i in ids if i in self._added and self._added[i] in KNOWN_IMAGE_TOKENS}
            if len(tokens) != 1 or ids.count(self.token_id(next(iter(tokens)))) != 1:
                return None  # no placeholder (or not one per image) in a user message or a tool result
            found |= tokens
        return found.pop() if len(found) == 1 else None

    def _check_images(self, ids: list[int], images: int) -> None:
        """One placeholder token per image, or a :class:`PromptError` naming what the template did."""
        token = self.image_token
        if token is None:
            raise PromptError(
                "the conversation has images but the chat template renders no image placeholder for an image part in "
                f"a user message and a tool result (known placeholders: {list(KNOWN_IMAGE_TOKENS)}); use the "
                "vision-language model's own tokenizer and template"
            )
        found = ids.count(self.token_id(token))
        if found != images:
            raise PromptError(f"the prompt holds {found} {token} placeholders for {images} images")

    # -- prompts ---------------------------------------------------------------------------------------------------

    def first_prompt(
        self,
        messages: Messages,
        tool_specs: Sequence[ToolSpec] | None,
        system_prompt: str | None,
        images: list[str] | None = None,
        *,
        format_tools: Callable[[Sequence[ToolSpec]], list[dict[str, Any]] | None] = format_tool_specs,
        format_messages: MessageFormatter = format_messages,
    ) -> list[int]:
        """The whole conversation rendered once (system, tools, messages, generation prompt) as token IDs.

        With ``images`` given, each image becomes one placeholder token (left for the server to expand) and its data
        URL is appended to ``images`` in prompt order; without it an image raises :class:`PromptError`.
        ``format_tools`` turns the tool specs into the template's ``tools`` (default :func:`format_tool_specs`),
        ``format_messages`` the messages into the template's messages (default :func:`format_messages`).

        Raises:
            PromptError: The template cannot render the conversation, or it is offered tools (or holds a tool round)
                and the template has no tool support (:attr:`tools_unsupported`).
        """
        if tool_specs or _holds_tool_round(messages):
            self._check_tools_supported()
        tools = format_tools(tool_specs) if tool_specs else None
        if tools and not self.tools_in_template:
            # The template would drop the tools: they reach the model in the system message instead.
            system_prompt = (
                f"{system_prompt}\n\n{tools_system_text(tools)}" if system_prompt else tools_system_text(tools)
            )
            tools = None
        before = len(images) if images is not None else 0
        formatted = format_messages(messages, system_prompt, images)
        json_text = self.json_arguments
        structured = with_history_calls(formatted, messages, force=False, json_text=json_text)
        try:
            text = self.render(structured, tools=tools, add_generation_prompt=True)
        except Exception as e:
            # Templates that need structured tool_calls before a tool message (gpt-oss): give every earlier call.
            retry = with_history_calls(formatted, messages, force=True, json_text=json_text)
            if retry == structured:
                raise PromptError(f"the chat template cannot render the first prompt: {type(e).__name__}: {e}") from e
            try:
                text = self.render(retry, tools=tools, add_generation_prompt=True)
            except Exception as again:
                raise PromptError(
                    "the chat template cannot render the first prompt's earlier assistant tool calls (a restored "
                    f"conversation or few-shot history), even as structured tool_calls: {type(again).__name__}: "
                    f"{again}"
                ) from again
        ids = self._encode_first(text, system_prompt, tools, structured)
        if images is not None and (len(images) > before or self._image_token_in(ids)):
            self._check_images(ids, len(images) - before)
        return ids

    def _check_tools_supported(self) -> None:
        if self.tools_unsupported is not None:
            raise PromptError(self.tools_unsupported)

    def _encode_first(
        self,
        text: str,
        system_prompt: str | None,
        tools: list[dict[str, Any]] | None,
        structured: list[dict[str, Any]],
    ) -> list[int]:
        """``encode(text)`` of a first prompt, its system-and-tools part encoded once per (system prompt, tools).

        The cut is the end of the last special token both this prompt and a stand-in conversation with the same
        system messages and tools render before they differ: text before it is the same for every conversation that
        starts so, and a special token ends every piece the tokenizer encodes on its own. Where the ids encoded in
        two parts are not exactly those of the whole text on the first prompt that brings the pair (a normalizer
        that treats the start of the text apart), the pair is never cut.
        """
        if not system_prompt and not tools:
            return self.encode(text)
        key = (system_prompt or "", json.dumps(tools, ensure_ascii=False, default=repr) if tools else "")
        if key in self._prefixes:
            known = self._prefixes.get(key)
            if known is not None and text.startswith(known[0]):
                return [*known[1], *self.encode(text[len(known[0]) :])]
            return self.encode(text)
        ids = self.encode(text)
        prefix = self._prefix_of(text, ids, tools, structured)
        with self._prefix_lock:
            self._prefixes[key] = prefix
            while len(self._prefixes) > _PREFIXES_KEPT:
                self._prefixes.popitem(last=False)
        return ids

    def _prefix_of(
        self, text: str, ids: list[int], tools: list[dict[str, Any]] | None, structured: list[dict[str, Any]]
    ) -> tuple[str, list[int]] | None:
        leading = [m for m in structured[:1] if m.get("role") == "system"]
        try:
            other = self.render(
                [*leading, {"role": "user", "content": _PROBE_USER}], tools=tools, add_generation_prompt=True
            )
        except Exception:
            return None
        common = _common_prefix_length(text, other)
        cut = max((m.end() for m in self._special_pattern.finditer(text, 0, common) if m.end() < common), default=0)
        if cut == 0:
            return None
        head = self.encode(text[:cut])
        if head + self.encode(text[cut:]) != ids:
            return None
        return text[:cut], head

    @functools.cached_property
    def _special_pattern(self) -> re.Pattern[str]:
        # The special tokens that strip no whitespace next to them (a piece the tokenizer encodes on its own ends at
        # one), longest first so that a token that starts another is not taken for it.
        decoder = self.tokenizer.added_tokens_decoder
        tokens = sorted(
            (t.content for t in decoder.values() if t.special and not t.rstrip and not t.lstrip and t.content),
            key=len,
            reverse=True,
        )
        return re.compile("|".join(map(re.escape, tokens))) if tokens else re.compile(r"(?!x)x")

    def _image_token_in(self, ids: list[int]) -> bool:
        """Whether placeholder tokens appear where no image was given (typed by the user, say): checked only when
        the template has a placeholder at all."""
        token = self.image_token if hasattr(self, "_image_token") else None
        return token is not None and self.token_id(token) in ids

    def continuation(
        self,
        new_messages: Sequence[Message],
        previous: Message | None,
        context: Sequence[int],
        *,
        earlier_calls: int = 0,
        behaviour: str = "the new messages",
        images: list[str] | None = None,
        format_messages: MessageFormatter = format_messages,
    ) -> list[int]:
        """Token IDs for messages added after the model's last output.

        Args:
            new_messages: Messages after the model's last assistant message.
            previous: That assistant message (its tool calls, with their ids, in the order the model wrote them).
            context: The trajectory so far; its last token says whether the model ended its turn itself.
            earlier_calls: How many tool calls the conversation held before ``previous`` (for templates that number
                calls themselves, see :attr:`numbers_calls`).
            behaviour: What is being rendered, for error messages.
            images: Collects the data URLs of the new messages' images in prompt order (each image is one
                placeholder token in the ids); without it an image raises :class:`PromptError`.
            format_messages: Turns Strands messages into the template's (default :func:`format_messages`).
        """
        if not new_messages:
            raise PromptError("no new messages to tokenize after the model's last turn")
        if _holds_tool_round(new_messages):
            self._check_tools_supported()
        elif self.user_turns_unsupported is not None:
            raise PromptError(self.user_turns_unsupported)
        history = [previous] if previous is not None else []
        before = len(images) if images is not None else 0
        formatted = format_messages([*history, *new_messages], None, images)[len(history) :]
        assistant: dict[str, Any] = {"role": "assistant", "content": _MARK}
        calls = tool_calls_of(previous, json_text=self.json_arguments) if previous is not None else []
        if calls:
            assistant["tool_calls"] = calls
        tail = [*self._stand_in, assistant, *formatted]
        if earlier_calls and self.numbers_calls:
            before_user = len(self._stand_in) - 1  # the earlier calls answer a query before the stand-in's user one
            tail = [*tail[:before_user], *_earlier_calls(earlier_calls, self.json_arguments), *tail[before_user:]]
        try:
            text = self._render_tail(tail, generation=True)
        except Exception as e:
            if len(calls) < 2:
                raise PromptError(f"the chat template cannot render {behaviour}: {type(e).__name__}: {e}") from e
            # Llama-3.x templates refuse several calls in one message; the calls are already in the trajectory as
            # generated, and each result is rendered on its own, so one call is enough to render what follows.
            assistant["tool_calls"] = calls[:1]
            text = self._render_tail(tail, generation=True)
        ids = self.encode(self._after_end_of_turn(text, context, behaviour))
        if images is not None and (len(images) > before or self._image_token_in(ids)):
            self._check_images(ids, len(images) - before)
        return ids

    def _after_end_of_turn(self, text: str, context: Sequence[int], behaviour: str) -> str:
        start = text.find(_MARK)
        # Templates that drop the content of a message with tool calls (Llama-3.x): search from the assistant turn.
        start = start + len(_MARK) if start != -1 else len(self._stand_in_text)
        after = text[start:]
        last = context[-1] if context else None
        emitted = self._added.get(last) if last is not None and last in self._end_ids else None
        if emitted is not None and (position := after.find(emitted)) != -1:
            # The model's stop token is the template's too (GLM's <|observation|> is also the tool message's first
            # token): keep it as generated, append only what follows.
            return after[position + len(emitted) :]
        found = [(p, t) for t in self.end_tokens if (p := after.find(t)) != -1]
        if not found:
            raise PromptError(
                f"the chat template closes the assistant turn before {behaviour} with none of the end-of-turn "
                f"tokens {list(self.end_tokens)}"
            )
        position, token = min(found)
        # The model stopped on another token (gpt-oss <|return|>, re-rendered <|end|>): keep the model's. Otherwise
        # its turn was cut short and the template's end of turn closes it.
        return after[position + len(token) :] if emitted is not None else after[position:]


def _common_prefix_length(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` start with alike (a binary search of C-speed comparisons)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


#: How many (system prompt, tools) pairs an encoder keeps encoded.
_PREFIXES_KEPT: Final = 64

_SHARED_LOCK = threading.Lock()
_SHARED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], PromptEncoder]] = weakref.WeakKeyDictionary()


def shared_prompt_encoder(tokenizer: PreTrainedTokenizerBase, *, enable_thinking: bool | None = None) -> PromptEncoder:
    """The :class:`PromptEncoder` of this tokenizer, its current chat template and ``enable_thinking``, built once and
    shared by every model (and thread) that asks for the same three.

    A tokenizer whose template, added tokens or special-token splitting changed since gets a new encoder; one that
    cannot be a weak dictionary key gets a new encoder each time.

    Raises:
        PromptError: The template cannot be followed incrementally.
    """
    template = tokenizer.chat_template
    template_key = template if isinstance(template, str) else repr(template)
    key = (template_key, enable_thinking, len(tokenizer), bool(getattr(tokenizer, "split_special_tokens", False)))
    try:
        encoders = _SHARED.get(tokenizer)
    except TypeError:  # not hashable or not weakly referenceable
        return PromptEncoder(tokenizer, enable_thinking=enable_thinking)
    found = encoders.get(key) if encoders is not None else None
    if found is not None:
        return found
    with _SHARED_LOCK:
        encoders = _SHARED.setdefault(tokenizer, {})
        found = encoders.get(key)
        if found is None:
            found = encoders[key] = PromptEncoder(tokenizer, enable_thinking=enable_thinking)
        return found


# The template reads a top-level ``thinking`` variable (not a message's ``message.thinking``).
_THINKING_VARIABLE: Final = re.compile(r"\{%-?\s*(?:el)?if\s+(?:not\s+)?thinking\b")


def _thinking_switch(template: Any) -> str:
    """The name of the template's thinking switch: ``enable_thinking``, or ``thinking`` where the template reads only
    that (DeepSeek-V3.1's original; llama.cpp's copies map ``enable_thinking`` onto it)."""
    text = template if isinstance(template, str) else ""
    if "enable_thinking" not in text and _THINKING_VARIABLE.search(text):
        return "thinking"
    return "enable_thinking"


def _holds_tool_round(messages: Sequence[Message]) -> bool:
    return any("toolUse" in block or "toolResult" in block for message in messages for block in message["content"])


def _earlier_calls(count: int, json_text: bool) -> list[dict[str, Any]]:
    """A stand-in user query answered by ``count`` tool calls and their results."""
    calls = [
        {
            "id": f"call{i:05d}",
            "type": "function",
            "function": {"name": _PROBE_TOOL, "arguments": call_arguments({}, json_text)},
        }
        for i in range(count)
    ]
    results = [{"role": "tool", "tool_call_id": c["id"], "name": _PROBE_TOOL, "content": "R"} for c in calls]
    return [{"role": "user", "content": "U"}, {"role": "assistant", "content": "", "tool_calls": calls}, *results]
