"""``POST /v1/chat/completions`` on the local test/dev engine: server-side chat templating with token ids.

It answers in vLLM's or SGLang's style (field names of token ids, errors, streaming rules).

A stock OpenAI-compatible client sends *messages*; the server renders them with the tokenizer's chat template,
tokenizes the text and generates. That is what makes text agents drift: the history an agent sends back is re-rendered
from parsed text, which need not tokenize to what the model generated. This endpoint reproduces it exactly:

* ``messages`` (+ ``tools``, ``chat_template_kwargs``) go through ``tokenizer.apply_chat_template(...,
  add_generation_prompt=True)`` and ``tokenizer.encode(text, add_special_tokens=False)``, as vLLM does; text parts of
  a content list are joined with ``"\\n"`` and tool-call arguments given as JSON strings are parsed to objects first
  (both as vLLM does);
* the reply comes from the same scripts as ``/generate`` (:class:`~strands_tito.testing.engine.script.Script`);
  conversations are matched by token prefix, and, because a re-rendered prompt may not extend the previous request's
  prompt + output, a request that extends no history falls back to the conversation whose last prompt it strictly
  extends (see :mod:`strands_tito.testing.engine.conversations`);
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

Every request is kept as an :class:`~strands_tito.testing.engine.records.EngineRecord` with ``input_ids`` = the rendered
prompt ids and ``output_ids`` = the generated ids, so tests can compare them with what a client recorded.

Deliberate differences from real servers: ``n > 1`` and non-text content parts are rejected; the model name is not
checked; ``response_format``, penalties and sampling knobs are ignored (the script decides the tokens); malformed
faults are a ``/generate`` feature (here they answer 500).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import TemplateError

from strands_tito.providers.rendering import render_chat_template
from strands_tito.testing.engine.conversations import Conversation
from strands_tito.testing.engine.core import EngineCore
from strands_tito.testing.engine.openai_parsing import (
    OPENAI_FLAVORS,
    REASONING_PARSERS,
    SGLANG_STREAM_TOKEN_IDS_MESSAGE,
    ChatError,
    ChatRequest,
    OpenAIFlavor,
    ParsedReply,
    common_prefix,
    error_body,
    parse_chat_request,
    parse_reply,
    partial_view,
)
from strands_tito.testing.engine.outputs import Outcome
from strands_tito.testing.engine.protocol import finish_abort, http_fault_body, token_logprob
from strands_tito.testing.engine.records import (
    NO_SCRIPT_MESSAGE,
    SSE_DONE,
    EngineRecord,
    new_record,
    sse_event,
    sse_stream,
)
from strands_tito.testing.engine.script import Reply, Step
from strands_tito.testing.http_server import AnyResponse, Connection, Request, json_response

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

# -- the endpoint ---------------------------------------------------------------------------------------------------


class ChatCompletions:
    """The ``/v1/chat/completions`` handler over one :class:`~strands_tito.testing.engine.core.EngineCore`."""

    def __init__(self, core: EngineCore, flavor: OpenAIFlavor, reasoning_parser: str | None) -> None:
        if flavor not in OPENAI_FLAVORS:
            raise ValueError(f"openai_flavor must be one of {OPENAI_FLAVORS}, got {flavor!r}")
        if reasoning_parser is not None and reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"reasoning_parser must be one of {REASONING_PARSERS} or None, got {reasoning_parser!r}")
        self.core = core
        self.flavor: OpenAIFlavor = flavor
        self.reasoning_parser = reasoning_parser

    # -- helpers ---------------------------------------------------------------------------------------------------

    def render(self, request: ChatRequest) -> list[int]:
        """The prompt token ids: chat template to text, then the tokenizer (no special tokens added)."""
        tokenizer = self.core.tokenizer
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
        context = self.core.context_length
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
        self.core.record(record)
        return json_response(body, error.status, headers)

    def _logprob_entry(self, request: ChatRequest, token: int, position: int) -> dict[str, Any]:
        text = self.core.decode_token(token)
        top: list[dict[str, Any]] = []
        if request.top_logprobs:
            for logprob, _, candidate in self.core.outputs.top_entries(position, token, request.top_logprobs, True):
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
        record = new_record(http.path, http.method, http.body, received)
        try:
            request = parse_chat_request(record.request, self.flavor)
            record.rid = request.id
            prompt = self.render(request)
            record.input_ids = list(prompt)
            max_new = self._max_new(request, prompt)
        except ChatError as exc:
            return self._error(record, exc)

        def on_abort(conversation: Conversation | None) -> AnyResponse:
            outcome = Outcome([], finish_abort(), success=False)
            return self._respond(request, record, prompt, outcome, conversation)

        def on_step(conversation: Conversation, step: Step | None) -> AnyResponse:
            if step is None:
                self.core.finish_fault(conversation, prompt)
                return self._error(record, ChatError(NO_SCRIPT_MESSAGE))
            return self._answer(request, record, prompt, step, max_new, conversation)

        return await self.core.schedule(
            request.id,
            prompt,
            record,
            conn,
            cache_cap=len(prompt) - 1,
            on_abort=on_abort,
            on_step=on_step,
            rerendered=True,
        )

    def _answer(  # noqa: PLR0917  the request's parts as the endpoint parsed them
        self,
        request: ChatRequest,
        record: EngineRecord,
        prompt: list[int],
        step: Step,
        max_new: int,
        conversation: Conversation,
    ) -> AnyResponse:
        outputs = self.core.outputs
        if isinstance(step, Reply):
            outcome = outputs.reply_outcome(step, request.sampling, max_new)
            return self._respond(request, record, prompt, outcome, conversation)
        self.core.finish_fault(conversation, prompt)
        if step.kind == "http":
            status = step.status or 503
            message = http_fault_body(status, step.message)["message"]
            return self._error(record, ChatError(message, status, str(status)), step.retry_after_headers)
        if step.kind == "context_overflow":
            context = self.core.context_length
            return self._error(
                record,
                ChatError(
                    f"This model's maximum context length is {context} tokens. However, your request has "
                    f"{len(prompt)} input tokens. Please reduce the length of the input messages."
                ),
            )
        if step.kind == "abort":
            if step.status is None:
                return self._respond(request, record, prompt, outputs.aborted_outcome(step, max_new), conversation)
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
        eos = self.core.eos_token_ids
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
    ) -> AnyResponse:
        core = self.core
        out = list(outcome.out)
        base = len(prompt)
        record.output_ids = out
        record.output_logprobs = [token_logprob(token, base + i) for i, token in enumerate(out)]
        core.finish(conversation, prompt, out, outcome.success)
        text = core.outputs.final_text(out, outcome.finish, request.sampling)
        parsed = parse_reply(text, request, self.reasoning_parser)
        record.status = 200
        if request.stream:
            events = self._chunks(request, prompt, outcome, parsed)
            record.response = [*events, "[DONE]"]
            core.record(record)
            return sse_stream([*(sse_event(event) for event in events), SSE_DONE])
        body = self._completion(request, prompt, outcome, parsed)
        record.response = body
        core.record(record)
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

    def _views(self, request: ChatRequest, out: list[int], parsed: ParsedReply) -> list[tuple[str, str]]:
        """The ``(reasoning, content)`` shown after each output token; the last one is the final parse."""
        views: list[tuple[str, str]] = []
        previous_text = ""
        for size in range(1, len(out)):
            text = self.core.outputs.decode(out[:size], skip_special_tokens=request.sampling.skip_special_tokens)
            if text.endswith("\ufffd"):
                text = previous_text  # an incomplete UTF-8 sequence is held back
            previous_text = text
            reasoning, content = partial_view(text, self.reasoning_parser, request.parse_tools)
            views.append((common_prefix(reasoning, parsed.reasoning), common_prefix(content, parsed.content)))
        if out:
            views.append((parsed.reasoning, parsed.content))
        return views

    def _chunks(  # noqa: C901  the stream's events in the order the client reads them
        self, request: ChatRequest, prompt: list[int], outcome: Outcome, parsed: ParsedReply
    ) -> list[dict[str, Any]]:
        """The SSE events: a role chunk, one chunk per token (deltas), the finish on the last, then usage."""
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
        sent_reasoning, sent_content = "", ""
        for i, (token, (reasoning, content)) in enumerate(zip(out, self._views(request, out, parsed), strict=True)):
            last = i == len(out) - 1
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
