"""Parsing for the local engine's ``/v1/chat/completions``: the request (vLLM/SGLang validation) and the reply text.

:func:`parse_chat_request` validates a decoded body and flattens messages for the chat template as vLLM does;
:func:`parse_reply` splits the scripted reply text into reasoning, content and hermes tool calls as the servers'
parsers do. The endpoint itself is :mod:`strands_tito.testing.engine.openai_chat`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from strands_tito.providers.tool_parsers import HermesToolParser
from strands_tito.testing.engine.protocol import SamplingParams

__all__ = [
    "OPENAI_FLAVORS",
    "REASONING_PARSERS",
    "SGLANG_STREAM_PROMPT_IDS_MESSAGE",
    "SGLANG_STREAM_TOKEN_IDS_MESSAGE",
    "ChatError",
    "ChatRequest",
    "OpenAIFlavor",
    "ParsedReply",
    "StopFieldError",
    "common_prefix",
    "error_body",
    "parse_chat_request",
    "parse_reply",
    "partial_view",
    "read_stops",
]

OpenAIFlavor = Literal["vllm", "sglang"]
OPENAI_FLAVORS: Final[tuple[str, ...]] = get_args(OpenAIFlavor)
REASONING_PARSERS: Final[tuple[str, ...]] = ("qwen3",)

#: SGLang 0.5.23's error for ``return_token_ids`` with ``stream`` (``serving_chat.py``).
SGLANG_STREAM_TOKEN_IDS_MESSAGE: Final[str] = (
    "return_token_ids is not supported with streaming on /v1/chat/completions. "
    "Please set stream=false when using return_token_ids=true."
)
SGLANG_STREAM_PROMPT_IDS_MESSAGE: Final[str] = (
    "return_prompt_token_ids is not supported with streaming. "
    "Please set stream=false when using return_prompt_token_ids=true."
)
_TOOL_CALL_START: Final[str] = "<tool_call>"
_THINK_START: Final[str] = "<think>"
_THINK_END: Final[str] = "</think>"


class ChatError(Exception):
    """A request answered with an error status and an OpenAI-style error body."""

    def __init__(self, message: str, status: int = 400, type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type_


def error_body(flavor: OpenAIFlavor, message: str, status: int, type_: str) -> dict[str, Any]:
    """vLLM: ``{"error": {...}}``; SGLang: its flat ``ErrorResponse``."""
    if flavor == "vllm":
        return {"error": {"message": message, "type": type_, "param": None, "code": status}}
    return {"object": "error", "message": message, "type": type_, "param": None, "code": status}


# -- request --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat completion request (the fields the engine acts on)."""

    id: str
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    parse_tools: bool
    stream: bool
    include_usage: bool
    max_tokens: int | None
    sampling: SamplingParams
    logprobs: bool
    top_logprobs: int
    return_token_ids: bool
    return_prompt_token_ids: bool
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ChatError(f"{name} must be an integer, got {value!r}")
    return value


def _bool_field(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ChatError(f"{name} must be a boolean, got {value!r}")
    return value


def _template_message(message: Any, index: int) -> dict[str, Any]:  # noqa: C901  one branch per message shape, read as a table
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ChatError(f"messages[{index}] must be an object with a string role")
    out: dict[str, Any] = {key: value for key, value in message.items() if key != "content"}
    content = message.get("content")
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatError(f"messages[{index}]: content part {kind!r} is not supported by strands-tito engine")
        content = "\n".join(texts)
    elif content is not None and not isinstance(content, str):
        raise ChatError(f"messages[{index}].content must be a string, a list of parts or null")
    out["content"] = content
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if not isinstance(tool_calls, list):
            raise ChatError(f"messages[{index}].tool_calls must be a list")
        parsed_calls = []
        for call in tool_calls:
            call = dict(call) if isinstance(call, dict) else call
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                # vLLM (and SGLang) hand templates the arguments as an object, as transformers expects.
                try:
                    arguments = json.loads(function["arguments"])
                except ValueError:
                    arguments = None
                if isinstance(arguments, dict):
                    call["function"] = {**function, "arguments": arguments}
            parsed_calls.append(call)
        out["tool_calls"] = parsed_calls
    return out


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    max_tokens = _int_field(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise ChatError(f"max_tokens must be at least 1, got {max_tokens}.")
    return max_tokens


def _logprob_fields(body: Mapping[str, Any]) -> tuple[bool, int]:
    top_logprobs = _int_field(body, "top_logprobs") or 0
    logprobs = _bool_field(body, "logprobs")
    if top_logprobs < 0 or top_logprobs > 20:
        raise ChatError(f"top_logprobs must be between 0 and 20, got {top_logprobs}.")
    if top_logprobs and not logprobs:
        raise ChatError("when using `top_logprobs`, `logprobs` must be set to true.")
    return logprobs, top_logprobs


class StopFieldError(ValueError):
    """A ``stop`` or ``stop_token_ids`` value of the wrong shape; ``field`` names which (each API words its 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def read_stops(raw: Mapping[str, Any]) -> tuple[tuple[str, ...], list[int]]:
    """``stop`` (a string or a list of strings) and ``stop_token_ids`` (a list of ints) as OpenAI-style APIs take them.

    Raises:
        StopFieldError: either value has the wrong shape.
    """
    stop = raw.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise StopFieldError("stop", "stop must be a string or a list of strings")
    stop_token_ids = raw.get("stop_token_ids") or []
    if not isinstance(stop_token_ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in stop_token_ids
    ):
        raise StopFieldError("stop_token_ids", "stop_token_ids must be a list of integers")
    return stops, stop_token_ids


def _stop_fields(body: Mapping[str, Any]) -> tuple[tuple[str, ...], list[int]]:
    try:
        return read_stops(body)
    except StopFieldError as e:
        raise ChatError(str(e)) from None


def parse_chat_request(body: Any, flavor: OpenAIFlavor) -> ChatRequest:
    """Validate a decoded chat completion body.

    Raises:
        ChatError: a 400 the flavour's server would also give (or one for what the engine does not support).
    """
    if not isinstance(body, dict):
        raise ChatError("the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ChatError("messages must be a non-empty list")
    n = _int_field(body, "n")
    if n is not None and n != 1:
        raise ChatError("n > 1 is not supported by strands-tito engine")
    stream = _bool_field(body, "stream")
    return_token_ids = _bool_field(body, "return_token_ids")
    return_prompt_token_ids = _bool_field(body, "return_prompt_token_ids")
    if flavor == "sglang" and stream:
        if return_prompt_token_ids:
            raise ChatError(SGLANG_STREAM_PROMPT_IDS_MESSAGE)
        if return_token_ids:
            raise ChatError(SGLANG_STREAM_TOKEN_IDS_MESSAGE)
    max_tokens = _max_tokens(body)
    logprobs, top_logprobs = _logprob_fields(body)
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ChatError("tools must be a list of objects")
    stops, stop_token_ids = _stop_fields(body)
    stream_options = body.get("stream_options")
    include_usage = bool(stream_options.get("include_usage")) if isinstance(stream_options, dict) else False
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ChatError("chat_template_kwargs must be an object")
    model = body.get("model")
    return ChatRequest(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        model=model if isinstance(model, str) else "",
        messages=[_template_message(message, i) for i, message in enumerate(messages)],
        tools=[dict(tool) for tool in tools] if tools else None,
        parse_tools=bool(tools) and body.get("tool_choice") != "none",
        stream=stream,
        include_usage=stream and include_usage,
        max_tokens=max_tokens,
        sampling=SamplingParams(
            max_new_tokens=max_tokens,
            stop=tuple(s for s in stops if s),
            stop_token_ids=tuple(stop_token_ids),
            ignore_eos=_bool_field(body, "ignore_eos"),
            skip_special_tokens=_bool_field(body, "skip_special_tokens", True),
            no_stop_trim=_bool_field(body, "no_stop_trim"),
        ),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        return_token_ids=return_token_ids,
        return_prompt_token_ids=return_prompt_token_ids,
        chat_template_kwargs=dict(kwargs or {}),
        add_generation_prompt=_bool_field(body, "add_generation_prompt", True),
    )


# -- reply parsing --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedReply:
    """What the server's parsers make of the reply text."""

    reasoning: str
    content: str
    tool_calls: list[dict[str, Any]]


def _split_reasoning(text: str, reasoning_parser: str | None) -> tuple[str, str]:
    """Qwen3-style: everything up to ``</think>`` is reasoning (a leading ``<think>`` dropped), the rest content."""
    if reasoning_parser is None or _THINK_END not in text:
        return "", text
    reasoning, _, content = text.partition(_THINK_END)
    reasoning = reasoning.split(_THINK_START, 1)[1] if _THINK_START in reasoning else reasoning
    return reasoning.strip("\n"), content.lstrip("\n")


def partial_view(text: str, reasoning_parser: str | None, tools: bool) -> tuple[str, str]:
    """The (reasoning, content) a partial reply shows so far (tool markup held back)."""
    if reasoning_parser is not None and _THINK_END not in text and text.lstrip("\n").startswith(_THINK_START):
        return text.split(_THINK_START, 1)[1].strip("\n"), ""
    reasoning, content = _split_reasoning(text, reasoning_parser)
    if tools and _TOOL_CALL_START in content:
        content = content[: content.find(_TOOL_CALL_START)]
    return reasoning, content


def parse_reply(text: str, request: ChatRequest, reasoning_parser: str | None) -> ParsedReply:
    """Split reasoning, then read hermes tool calls (all or nothing, as vLLM's hermes parser does)."""
    reasoning, content = _split_reasoning(text, reasoning_parser)
    if not request.parse_tools or _TOOL_CALL_START not in content:
        return ParsedReply(reasoning, content, [])
    calls = HermesToolParser().parse(content)
    if not calls or any(call.is_error for call in calls):
        return ParsedReply(reasoning, content, [])
    tool_calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.input, ensure_ascii=False)},
        }
        for call in calls
    ]
    return ParsedReply(reasoning, content[: content.find(_TOOL_CALL_START)], tool_calls)


def common_prefix(a: str, b: str) -> str:
    limit = min(len(a), len(b))
    index = next((i for i in range(limit) if a[i] != b[i]), limit)
    return a[:index]
