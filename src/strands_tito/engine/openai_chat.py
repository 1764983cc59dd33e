"""``POST /v1/chat/completions`` on the local engine: server-side chat templating with token ids, vLLM or SGLang style.

A stock OpenAI-compatible client sends *messages*; the server renders them with the tokenizer's chat template,
tokenizes the text and generates. That is what makes text agents drift: the history an agent sends back is re-rendered
from parsed text, which need not tokenize to what the model generated. This endpoint reproduces it exactly:

* ``messages`` (+ ``tools``, ``chat_template_kwargs``) go through ``tokenizer.apply_chat_template(...,
  add_generation_prompt=True)`` and ``tokenizer.encode(text, add_special_tokens=False)``, as vLLM does; text parts of
  a content list are joined with ``"\\n"`` and tool-call arguments given as JSON strings are parsed to objects first
  (both as vLLM does);
* the reply comes from the same scripts as ``/generate`` (:class:`~strands_tito.engine.script.Script`); conversations
  are matched by token prefix, and, because a re-rendered prompt may not extend the previous request's prompt +
  output, a request that extends no history falls back to the conversation whose last prompt it strictly extends
  (see :mod:`strands_tito.engine.conversations`);
* ``max_completion_tokens`` / ``max_tokens``, ``stop``, ``stop_token_ids``, ``ignore_eos``, ``skip_special_tokens``
  cut the reply like ``/generate`` does; ``logprobs`` / ``top_logprobs`` come back in the OpenAI shape with the
  engine's deterministic logprobs;
* with ``tools`` (and ``tool_choice`` other than ``"none"``) hermes tool calls in the reply text become OpenAI
  ``tool_calls`` (finish reason ``tool_calls``); as vLLM's hermes parser does, ``content`` is the text before the first
  ``<tool_call>``, and a reply with a malformed call is returned as plain content;
* ``reasoning_parser="qwen3"`` splits ``...</think>`` off into ``reasoning`` (vLLM) / ``reasoning_content`` (SGLang);
* ``stream`` gives one SSE chunk per generated token (deltas), the finish reason and tool calls on the last one, then
  a ``usage`` chunk when ``stream_options.include_usage``, then ``[DONE]``.

Token ids (``return_token_ids: true``) follow the server flavour, whose field names differ:

* ``vllm``: top-level ``prompt_token_ids`` and ``choices[i].token_ids``; streaming is allowed (prompt ids in the first
  chunk, each chunk's ``token_ids`` its new ids);
* ``sglang``: ``choices[i].prompt_token_ids`` and ``choices[i].response_token_ids`` (``return_prompt_token_ids``: the
  prompt ids only); combined with ``stream: true`` the request is rejected with SGLang's 400.

Every request is kept as an :class:`~strands_tito.engine.server.EngineRecord` with ``input_ids`` = the rendered prompt
ids and ``output_ids`` = the generated ids, so tests can compare them with what a client recorded.

Deliberate differences from real servers: ``n > 1`` and non-text content parts are rejected; the model name is not
checked; ``response_format``, penalties and sampling knobs are ignored (the script decides the tokens); malformed
faults are a ``/generate`` feature (here they answer 500).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from jinja2 import TemplateError

from ..rendering import render_chat_template
from ..tool_parsers import HermesToolParser
from .http import AnyResponse, Connection, Request, StreamResponse, json_response
from .outputs import Outcome
from .protocol import SamplingParams, finish_abort, http_fault_body, token_logprob
from .script import Reply, Step

if TYPE_CHECKING:
    from .conversations import Conversation
    from .server import EngineRecord, LocalEngine

__all__ = [
    "OPENAI_FLAVORS",
    "REASONING_PARSERS",
    "SGLANG_STREAM_TOKEN_IDS_MESSAGE",
    "ChatCompletions",
    "ChatError",
    "ChatRequest",
    "OpenAIFlavor",
    "parse_chat_request",
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


def _template_message(message: Any, index: int) -> dict[str, Any]:
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
    max_tokens = _int_field(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        raise ChatError(f"max_tokens must be at least 1, got {max_tokens}.")
    top_logprobs = _int_field(body, "top_logprobs") or 0
    logprobs = _bool_field(body, "logprobs")
    if top_logprobs < 0 or top_logprobs > 20:
        raise ChatError(f"top_logprobs must be between 0 and 20, got {top_logprobs}.")
    if top_logprobs and not logprobs:
        raise ChatError("when using `top_logprobs`, `logprobs` must be set to true.")
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ChatError("tools must be a list of objects")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise ChatError("stop must be a string or a list of strings")
    stop_token_ids = body.get("stop_token_ids") or []
    if not isinstance(stop_token_ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in stop_token_ids
    ):
        raise ChatError("stop_token_ids must be a list of integers")
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


def _partial_view(text: str, reasoning_parser: str | None, tools: bool) -> tuple[str, str]:
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


def _common_prefix(a: str, b: str) -> str:
    limit = min(len(a), len(b))
    index = next((i for i in range(limit) if a[i] != b[i]), limit)
    return a[:index]


# -- the endpoint ---------------------------------------------------------------------------------------------------


class ChatCompletions:
    """The ``/v1/chat/completions`` handler of one :class:`~strands_tito.engine.server.LocalEngine`."""

    def __init__(self, engine: LocalEngine, flavor: OpenAIFlavor, reasoning_parser: str | None) -> None:
        if flavor not in OPENAI_FLAVORS:
            raise ValueError(f"openai_flavor must be one of {OPENAI_FLAVORS}, got {flavor!r}")
        if reasoning_parser is not None and reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"reasoning_parser must be one of {REASONING_PARSERS} or None, got {reasoning_parser!r}")
        self.engine = engine
        self.flavor: OpenAIFlavor = flavor
        self.reasoning_parser = reasoning_parser

    # -- helpers ---------------------------------------------------------------------------------------------------

    def render(self, request: ChatRequest) -> list[int]:
        """The prompt token ids: chat template to text, then the tokenizer (no special tokens added)."""
        tokenizer = self.engine.tokenizer
        try:
            text = render_chat_template(
                tokenizer,
                request.messages,
                tools=request.tools,
                add_generation_prompt=request.add_generation_prompt,
                **request.chat_template_kwargs,
            )
        except (TemplateError, TypeError, ValueError, KeyError) as exc:
            raise ChatError(f"the chat template could not render the messages: {exc}") from exc
        if not isinstance(text, str):
            raise ChatError("the chat template did not render to text")
        return list(tokenizer.encode(text, add_special_tokens=False))

    def _max_new(self, request: ChatRequest, prompt: list[int]) -> int:
        context = self.engine.context_length
        if len(prompt) >= context:
            raise ChatError(
                f"This model's maximum context length is {context} tokens. However, your request has {len(prompt)} "
                "input tokens. Please reduce the length of the input messages."
            )
        room = context - len(prompt)
        if request.max_tokens is not None and request.max_tokens > room:
            raise ChatError(
                f"'max_tokens' or 'max_completion_tokens' is too large: {request.max_tokens}. This model's maximum "
                f"context length is {context} tokens and your request has {len(prompt)} input tokens "
                f"({request.max_tokens} > {context} - {len(prompt)})."
            )
        return request.max_tokens if request.max_tokens is not None else room

    def _error(self, record: EngineRecord, error: ChatError, headers: Mapping[str, str] | None = None) -> AnyResponse:
        body = error_body(self.flavor, error.message, error.status, error.type)
        record.status, record.response = error.status, body
        self.engine._record(record)
        return json_response(body, error.status, headers)

    def _token_text(self, token: int) -> str:
        return self.engine._outputs.decode([token], skip_special_tokens=False)

    def _logprob_entry(self, request: ChatRequest, token: int, position: int) -> dict[str, Any]:
        text = self._token_text(token)
        top: list[dict[str, Any]] = []
        if request.top_logprobs:
            for logprob, _, candidate in self.engine._outputs._top_entries(position, token, request.top_logprobs, True):
                top.append({"token": candidate, "logprob": logprob, "bytes": list(str(candidate).encode())})
        return {
            "token": text,
            "logprob": token_logprob(token, position),
            "bytes": list(text.encode()),
            "top_logprobs": top,
        }

    # -- request lifecycle -----------------------------------------------------------------------------------------

    async def handle(self, http: Request, conn: Connection, received: float) -> AnyResponse:
        """Answer one ``POST /v1/chat/completions``."""
        from .server import NO_SCRIPT_MESSAGE, EngineRecord, _Disconnected, _Flight, _parse_body

        engine = self.engine
        body = _parse_body(http.body)
        record = EngineRecord(
            rid=None, path=http.path, method=http.method, request=body, status=0, response=None, received_at=received
        )
        try:
            request = parse_chat_request(body, self.flavor)
            record.rid = request.id
            prompt = self.render(request)
            record.input_ids = list(prompt)
            max_new = self._max_new(request, prompt)
        except ChatError as exc:
            return self._error(record, exc)

        flight = _Flight(request.id)
        engine._flights.add(flight)
        conversation: Conversation | None = None
        try:
            assert engine._running_event is not None
            if not engine._running_event.is_set() and await engine._wait(0.0, conn, flight) == "aborted":
                return self._respond(
                    request, record, prompt, Outcome([], finish_abort(), success=False), None, received
                )
            conversation, step = engine._assign(prompt, len(prompt) - 1, record, rerendered=True)
            status = await engine._wait_for_step(step, conn, flight)
            if status == "aborted":
                outcome = Outcome([], finish_abort(), success=False)
                return self._respond(request, record, prompt, outcome, conversation, received)
            if step is None:
                engine._tracker.finish(conversation, prompt, ())
                return self._error(record, ChatError(NO_SCRIPT_MESSAGE))
            return self._answer(request, record, prompt, step, max_new, conversation, received)
        except _Disconnected:
            return engine._disconnected(record, conversation, prompt)
        finally:
            engine._flights.discard(flight)
            if conversation is not None:
                engine._tracker.release(conversation)

    def _answer(
        self,
        request: ChatRequest,
        record: EngineRecord,
        prompt: list[int],
        step: Step,
        max_new: int,
        conversation: Conversation,
        received: float,
    ) -> AnyResponse:
        outputs = self.engine._outputs
        if isinstance(step, Reply):
            outcome = outputs.apply_stops(outputs.reply_ids(step), request.sampling, max_new)
            if step.finish is not None:
                outcome.finish = dict(step.finish)
            return self._respond(request, record, prompt, outcome, conversation, received)
        self.engine._tracker.finish(conversation, prompt, ())
        if step.kind == "http":
            status = step.status or 503
            headers = {"retry-after": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            message = http_fault_body(status, step.message)["message"]
            return self._error(record, ChatError(message, status, str(status)), headers)
        if step.kind == "context_overflow":
            context = self.engine.context_length
            return self._error(
                record,
                ChatError(
                    f"This model's maximum context length is {context} tokens. However, your request has "
                    f"{len(prompt)} input tokens. Please reduce the length of the input messages."
                ),
            )
        if step.kind == "abort":
            if step.status is None:
                partial = outputs.reply_ids(step.reply) if step.reply is not None else []
                outcome = Outcome(partial[:max_new], finish_abort(step.message or "Aborted"), success=False)
                return self._respond(request, record, prompt, outcome, conversation, received)
            return self._error(record, ChatError(step.message or "Aborted", step.status, str(step.status)))
        # Malformed bodies are a /generate feature.
        return self._error(
            record,
            ChatError(f"fault {step.label} is not supported on /v1/chat/completions", 500, "InternalServerError"),
        )

    # -- bodies ----------------------------------------------------------------------------------------------------

    def _finish_reason(self, outcome: Outcome, parsed: ParsedReply) -> str:
        finish = outcome.finish or {}
        kind = str(finish.get("type", "stop"))
        if kind == "stop" and parsed.tool_calls:
            return "tool_calls"
        return kind

    def _stop_fields(self, outcome: Outcome) -> dict[str, Any]:
        finish = outcome.finish or {}
        matched = finish.get("matched") if finish.get("type") == "stop" else None
        if self.flavor == "sglang":
            return {"matched_stop": matched}
        # vLLM reports the stop string or stop token that ended the reply; None for EOS.
        eos = self.engine.eos_token_ids
        return {"stop_reason": None if (isinstance(matched, int) and matched in eos) else matched}

    def _message(self, parsed: ParsedReply) -> dict[str, Any]:
        reasoning = parsed.reasoning or None
        content = parsed.content or None
        if self.flavor == "vllm":
            return {
                "role": "assistant",
                "content": content,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": parsed.tool_calls,
                "reasoning": reasoning,
            }
        return {
            "role": "assistant",
            "content": content,
            "reasoning_content": reasoning,
            "tool_calls": parsed.tool_calls or None,
        }

    def _usage(self, prompt: list[int], out: list[int]) -> dict[str, Any]:
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(out),
            "total_tokens": len(prompt) + len(out),
            "prompt_tokens_details": None,
        }

    def _respond(
        self,
        request: ChatRequest,
        record: EngineRecord,
        prompt: list[int],
        outcome: Outcome,
        conversation: Conversation | None,
        received: float,
    ) -> AnyResponse:
        engine = self.engine
        out = list(outcome.out)
        base = len(prompt)
        record.output_ids = out
        record.output_logprobs = [token_logprob(token, base + i) for i, token in enumerate(out)]
        sequence = [*prompt, *out]
        engine._tracker.finish(conversation, sequence if outcome.success else prompt, sequence)
        text = engine._outputs.final_text(out, outcome.finish, request.sampling)
        parsed = parse_reply(text, request, self.reasoning_parser)
        record.status = 200
        if request.stream:
            events = self._chunks(request, prompt, outcome, parsed)
            record.response = [*events, "[DONE]"]
            engine._record(record)
            from .server import _SSE_DONE, _iterate, _sse

            return StreamResponse(_iterate([*(_sse(event) for event in events), _SSE_DONE]))
        body = self._completion(request, prompt, outcome, parsed)
        record.response = body
        engine._record(record)
        return json_response(body)

    def _logprobs(self, request: ChatRequest, tokens: Sequence[int], start: int) -> dict[str, Any] | None:
        if not request.logprobs:
            return None
        return {"content": [self._logprob_entry(request, token, start + i) for i, token in enumerate(tokens)]}

    def _completion(
        self, request: ChatRequest, prompt: list[int], outcome: Outcome, parsed: ParsedReply
    ) -> dict[str, Any]:
        out = outcome.out
        choice: dict[str, Any] = {
            "index": 0,
            "message": self._message(parsed),
            "logprobs": self._logprobs(request, out, len(prompt)),
            "finish_reason": self._finish_reason(outcome, parsed),
            **self._stop_fields(outcome),
        }
        body: dict[str, Any] = {
            "id": request.id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [choice],
        }
        if self.flavor == "vllm":
            if request.return_token_ids:
                choice["token_ids"] = list(out)
            body.update({"service_tier": None, "system_fingerprint": None})
            body["usage"] = self._usage(prompt, out)
            body["prompt_logprobs"] = None
            if request.return_token_ids:
                body["prompt_token_ids"] = list(prompt)
            body["kv_transfer_params"] = None
        else:
            if request.return_token_ids or request.return_prompt_token_ids:
                choice["prompt_token_ids"] = list(prompt)
            if request.return_token_ids:
                choice["response_token_ids"] = list(out)
            body["usage"] = self._usage(prompt, out)
        return body

    def _chunks(
        self, request: ChatRequest, prompt: list[int], outcome: Outcome, parsed: ParsedReply
    ) -> list[dict[str, Any]]:
        """The SSE events: a role chunk, one chunk per token (deltas), the finish on the last, then usage."""
        outputs = self.engine._outputs
        created = int(time.time())
        with_ids = self.flavor == "vllm" and request.return_token_ids

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {
                "id": request.id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": request.model,
                "choices": choices,
                **extra,
            }

        first_choice: dict[str, Any] = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        if with_ids:
            first_choice["token_ids"] = []
        events = [chunk([first_choice], **({"prompt_token_ids": list(prompt)} if with_ids else {}))]

        out = outcome.out
        reasoning_key = "reasoning" if self.flavor == "vllm" else "reasoning_content"
        final_reasoning, final_content = parsed.reasoning, parsed.content
        sent_reasoning, sent_content, previous_text = "", "", ""
        for i, token in enumerate(out):
            last = i == len(out) - 1
            if last:
                reasoning, content = final_reasoning, final_content
            else:
                text = outputs.decode(out[: i + 1], skip_special_tokens=request.sampling.skip_special_tokens)
                if text.endswith("\ufffd"):
                    text = previous_text  # an incomplete UTF-8 sequence is held back
                previous_text = text
                view_reasoning, view_content = _partial_view(text, self.reasoning_parser, request.parse_tools)
                reasoning = _common_prefix(view_reasoning, final_reasoning)
                content = _common_prefix(view_content, final_content)
            delta: dict[str, Any] = {}
            if len(reasoning) > len(sent_reasoning):
                delta[reasoning_key] = reasoning[len(sent_reasoning) :]
                sent_reasoning = reasoning
            if len(content) > len(sent_content):
                delta["content"] = content[len(sent_content) :]
                sent_content = content
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            if request.logprobs:
                choice["logprobs"] = self._logprobs(request, [token], len(prompt) + i)
            if last:
                if parsed.tool_calls:
                    delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(parsed.tool_calls)]
                choice["finish_reason"] = self._finish_reason(outcome, parsed)
                choice.update(self._stop_fields(outcome))
            if with_ids:
                choice["token_ids"] = [token]
            events.append(chunk([choice]))
        if not out:  # nothing generated (an abort): the finish still needs a chunk
            choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": self._finish_reason(outcome, parsed)}
            choice.update(self._stop_fields(outcome))
            if with_ids:
                choice["token_ids"] = []
            events.append(chunk([choice]))
        if request.include_usage:
            events.append(chunk([], usage=self._usage(prompt, out)))
        return events
