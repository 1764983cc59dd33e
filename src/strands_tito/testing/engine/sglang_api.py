"""SGLang's native ``POST /generate`` on the local engine (SGLang 0.5.23's validation, bodies, SSE and faults).

Parsing and the exact error texts live in :mod:`~strands_tito.testing.engine.protocol`, the body shapes in
:mod:`~strands_tito.testing.engine.outputs`; this module runs a request through the
:class:`~strands_tito.testing.engine.core.EngineCore` and turns the scripted step into the answer (a reply, an HTTP
fault, a context overflow, an abort or a malformed body).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from strands_tito.testing.engine.conversations import Conversation
from strands_tito.testing.engine.core import EngineCore, weight_version_spans
from strands_tito.testing.engine.images import check_image_data
from strands_tito.testing.engine.outputs import Outcome
from strands_tito.testing.engine.protocol import (
    DEFAULT_MAX_NEW_TOKENS,
    GenerateRequest,
    ProtocolError,
    fastapi_error,
    finish_abort,
    http_fault_body,
    input_too_long_message,
    logprob_start_len_message,
    object_error_body,
    parse_generate_request,
    requested_too_many_message,
    scheduler_input_length_message,
    sse_error_event,
    token_logprob,
    value_error,
    verify_sampling_params,
)
from strands_tito.testing.engine.records import (
    NO_SCRIPT_MESSAGE,
    NON_JSON_BODY,
    SSE_DONE,
    EngineRecord,
    new_record,
    sse_event,
    sse_stream,
    truncated_json,
)
from strands_tito.testing.engine.script import DEFAULT_REPLY, Fault, Reply, Step
from strands_tito.testing.http_server import AnyResponse, Connection, RawResponse, Request, Response, json_response

__all__ = ["WAITING_ABORT", "GenerateEndpoint", "parse_generate_body"]

#: The abort message of a request aborted before it left the waiting queue (tokenizer_manager.py:3596).
WAITING_ABORT = "Abort in waiting queue"

logger = logging.getLogger(__name__)


def parse_generate_body(request: Request) -> GenerateRequest:
    """Decode and validate a ``/generate`` body (FastAPI's 422s for a missing or non-JSON body)."""
    if not request.body:
        raise fastapi_error([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    try:
        body = json.loads(request.body)
    except ValueError as exc:
        error: dict[str, Any] = {"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error"}
        if isinstance(exc, json.JSONDecodeError):
            error["loc"] = ("body", exc.pos)
            error["ctx"] = {"error": exc.msg}
        error["input"] = {}
        raise fastapi_error([error]) from None
    return parse_generate_request(body)


class _Call:
    """One ``/generate`` request on its way through the engine."""

    def __init__(self, generate: GenerateRequest, record: EngineRecord, prompt: list[int], received: float) -> None:
        self.generate = generate
        self.record = record
        self.prompt = prompt
        self.received = received
        self.max_new = 0
        self.weight_version = "default"


class GenerateEndpoint:
    """The ``/generate`` handler over one :class:`~strands_tito.testing.engine.core.EngineCore`."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core

    async def handle(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        """Answer one ``POST``/``PUT /generate``; every outcome is recorded."""
        record = new_record(request.path, request.method, request.body, received)
        try:
            generate = parse_generate_body(request)
        except ProtocolError as exc:
            return self._reject(record, exc, exc.stream)
        record.rid = generate.rid
        try:
            return await self._run(generate, record, conn, received)
        except ProtocolError as exc:
            return self._reject(record, exc, generate.stream)
        except Exception as exc:  # a broken script or tokenizer: answer like an unhandled server error, keep a record
            logger.exception("local engine failed on /generate")
            body = {"error": {"message": f"strands-tito engine internal error: {exc!r}"}}
            record.status, record.response = 500, body
            self.core.record(record)
            return json_response(body, 500)

    def _reject(self, record: EngineRecord, exc: ProtocolError, stream: bool) -> AnyResponse:
        if stream and exc.stage == "value":
            events = [sse_error_event(exc.message)]
            record.status = 200
            record.response = [*events, "[DONE]"]
            self.core.record(record)
            return sse_stream([*(sse_event(event) for event in events), SSE_DONE])
        record.status = exc.status
        record.response = exc.body
        self.core.record(record)
        return json_response(exc.body, exc.status)

    def _validate(self, generate: GenerateRequest, prompt: list[int]) -> int:
        """Run SGLang's length/sampling/scheduler checks; return the effective max_new_tokens."""
        core = self.core
        if not prompt:
            raise value_error("input_ids cannot be empty.")
        if any(token < 0 or token >= core.vocab_size for token in prompt):
            raise value_error(
                f"The input_ids {prompt} contains values greater than the vocab size ({core.vocab_size})."
            )
        prompt_tokens = len(prompt)
        # TokenizerManager._validate_one_request (tokenizer_manager.py:1333-1378): the input counts the context a
        # speculative server reserves for draft tokens, in the checks and in the messages' N; the total check is ">".
        input_tokens = prompt_tokens + core.reserved_tokens
        if input_tokens >= core.context_length:
            raise value_error(input_too_long_message(input_tokens, core.context_length))
        requested = generate.sampling.max_new_tokens
        if requested is not None and requested + input_tokens > core.context_length:
            raise value_error(requested_too_many_message(input_tokens, requested, core.context_length))
        verify_sampling_params(generate.sampling)
        if generate.logprob_start_len > prompt_tokens:
            raise value_error(logprob_start_len_message(generate.logprob_start_len, prompt_tokens))
        if prompt_tokens >= core.max_req_input_len:
            raise value_error(scheduler_input_length_message(prompt_tokens, core.max_req_input_len))
        if core.routed_experts is not None and generate.return_routed_experts:
            start = generate.routed_experts_start_len
            if not 0 <= start <= prompt_tokens:
                raise value_error(
                    f"routed_experts_start_len={start} is out of range: it must be in [0, {prompt_tokens}] "
                    f"(the number of input tokens)."
                )
        wanted = requested if requested is not None else DEFAULT_MAX_NEW_TOKENS
        return min(wanted, core.max_req_len - prompt_tokens - 1)

    async def _run(
        self, generate: GenerateRequest, record: EngineRecord, conn: Connection, received: float
    ) -> AnyResponse:
        core = self.core
        prompt = (
            generate.input_ids if generate.input_ids is not None else list(core.tokenizer.encode(generate.text or ""))
        )
        record.input_ids = list(prompt)
        call = _Call(generate, record, prompt, received)
        call.max_new = self._validate(generate, prompt)
        call.weight_version = core.weight_version
        if generate.image_data is not None:
            record.image_data = list(generate.image_data)
            refused = check_image_data(
                generate.image_data, prompt, supported=core.image_understanding, token_id=core.image_token_id
            )
            if refused is not None:
                raise refused
        cap = len(prompt) - 1
        if generate.return_logprob and generate.logprob_start_len >= 0:
            cap = min(cap, generate.logprob_start_len)  # SGLang caps prefix reuse at logprob_start_len
        return await core.schedule(
            generate.rid,
            prompt,
            record,
            conn,
            cache_cap=cap,
            on_abort=lambda conversation: self._respond(call, self._aborted(conversation), conversation),
            on_step=lambda conversation, step: self._answer(call, step, conversation),
        )

    @staticmethod
    def _aborted(conversation: Conversation | None) -> Outcome:
        """An abort before the step ran: still in the waiting queue (paused, no conversation yet) or running."""
        if conversation is None:  # tokenizer_manager.py:3590-3640
            return Outcome([], {"type": "abort", "message": WAITING_ABORT}, success=False, waiting=True)
        return Outcome([], finish_abort(), success=False)

    def _answer(self, call: _Call, step: Step | None, conversation: Conversation) -> AnyResponse:
        outputs = self.core.outputs
        if step is None:
            raise value_error(NO_SCRIPT_MESSAGE)
        if isinstance(step, Reply):
            outcome = outputs.reply_outcome(step, call.generate.sampling, call.max_new)
            return self._respond(call, outcome, conversation)
        self.core.finish_fault(conversation, call.prompt)
        if step.kind == "http":
            status = step.status or 503
            body = http_fault_body(status, step.message)
            return self._error(call.record, body, status, step.retry_after_headers)
        if step.kind == "context_overflow":
            raise value_error(self._overflow_message(step, call.generate, len(call.prompt)))
        if step.kind == "abort":
            if step.variant == "waiting":
                return self._respond(call, self._aborted(None), conversation)
            message = step.message or "Aborted"
            if step.status is None:
                return self._respond(call, outputs.aborted_outcome(step, call.max_new), conversation)
            if step.status == 400:
                raise value_error(message)
            return self._error(call.record, object_error_body(message, step.status, str(step.status)), step.status)
        reply = step.reply or DEFAULT_REPLY
        outcome = outputs.apply_stops(outputs.reply_ids(reply), call.generate.sampling, call.max_new)
        outcome.success = False
        return self._respond(call, outcome, conversation, malformed=step)

    def _error(
        self, record: EngineRecord, body: dict[str, Any], status: int, headers: dict[str, str] | None = None
    ) -> AnyResponse:
        record.status, record.response = status, body
        self.core.record(record)
        return json_response(body, status, headers)

    def _overflow_message(self, fault: Fault, generate: GenerateRequest, prompt_tokens: int) -> str:
        core = self.core
        if fault.variant == "total":
            requested = generate.sampling.max_new_tokens
            wanted = requested if requested is not None else DEFAULT_MAX_NEW_TOKENS
            return requested_too_many_message(prompt_tokens, wanted, core.context_length)
        if fault.variant == "scheduler":
            return scheduler_input_length_message(prompt_tokens, core.max_req_input_len)
        if fault.variant == "kv_budget":  # scheduler.py:2722-2735, a 400 by set_finish_with_abort's default
            return f"Request prompt exceeds the KV memory budget: input_len={prompt_tokens}."
        return input_too_long_message(prompt_tokens, core.context_length)

    # -- the 200 answer --------------------------------------------------------------------------------------------

    def _respond(
        self, call: _Call, outcome: Outcome, conversation: Conversation | None, malformed: Fault | None = None
    ) -> AnyResponse:
        """Build, record and return a 200 answer (plain JSON or SSE), broken as ``malformed`` asks."""
        core, record, prompt = self.core, call.record, call.prompt
        out = outcome.out
        base = len(prompt)
        outcome.weight_versions = weight_version_spans(call.weight_version, core.weight_version, len(out))
        record.output_ids = list(out)
        record.output_logprobs = [token_logprob(token, base + i) for i, token in enumerate(out)]
        core.finish(conversation, prompt, out, outcome.success)
        cached = record.cached_tokens or 0
        bodies = core.outputs.bodies(call.generate, prompt, outcome, cached, call.received)
        kind = malformed.malformed_kind if malformed is not None else None
        if kind is not None:
            for body in bodies:
                core.outputs.malform(kind, body, prompt)
        record.status = 200
        if not call.generate.stream:
            return self._plain(record, bodies[-1], kind)
        return self._stream(record, bodies, kind)

    def _plain(self, record: EngineRecord, body: dict[str, Any], kind: str | None) -> AnyResponse:
        if kind == "non_json":
            record.response = NON_JSON_BODY
            self.core.record(record)
            return Response(200, NON_JSON_BODY.encode(), "application/json")
        response = json_response(body, 200)
        if kind == "truncated_body":
            record.response, raw = truncated_json(response)
            self.core.record(record)
            return raw
        record.response = json.loads(response.body)
        self.core.record(record)
        return response

    def _stream(self, record: EngineRecord, bodies: list[dict[str, Any]], kind: str | None) -> AnyResponse:
        if kind == "non_json":
            chunks = [f"data: {NON_JSON_BODY}\n\n".encode() for _ in bodies] + [SSE_DONE]
            record.response = [NON_JSON_BODY for _ in bodies] + ["[DONE]"]
        else:
            chunks = [sse_event(body) for body in bodies] + [SSE_DONE]
            record.response = [*bodies, "[DONE]"]
        if kind == "truncated_body":
            data = b"".join(chunks)
            half = data[: len(data) // 2]
            record.response = half.decode("utf-8", errors="replace")
            self.core.record(record)
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\nserver: strands-tito-engine\r\n\r\n"
            )
            return RawResponse(head + b"%x\r\n%b\r\n" % (len(half), half))
        self.core.record(record)
        return sse_stream(chunks)
