"""SGLang 0.5.23 ``/generate`` protocol pieces: request validation, error bodies and messages, deterministic logprobs
and routed-expert ids.

Validation happens in SGLang's order, and each stage has its own 400 body:

1. FastAPI parsing of ``GenerateReqInput`` (wrong JSON types):
   ``{"object":"error","message":...,"type":"Bad Request","param":null,"code":400}``;
2. the JSON contract on ``sampling_params`` (unknown keys, wrong types): ``{"error": "<serde-style text>"}``;
3. ``ValueError`` in the tokenizer manager / scheduler aborts with status 400: ``{"error":{"message":...}}``
   (in streaming mode: HTTP 200 with an SSE error event instead).
"""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "SAMPLING_PARAM_KEYS",
    "GenerateRequest",
    "ProtocolError",
    "SamplingParams",
    "contract_error",
    "encode_routed_experts",
    "fastapi_error",
    "finish_abort",
    "finish_length",
    "finish_stop",
    "http_fault_body",
    "input_too_long_message",
    "logprob_start_len_message",
    "object_error_body",
    "parse_generate_request",
    "requested_too_many_message",
    "routed_experts_for",
    "scheduler_input_length_message",
    "sse_error_event",
    "token_logprob",
    "value_error",
    "verify_sampling_params",
]

DEFAULT_MAX_NEW_TOKENS: Final[int] = 128
_GRAMMAR_KEYS: Final[tuple[str, ...]] = ("json_schema", "regex", "ebnf", "structural_tag")

ErrorStage = Literal["fastapi", "contract", "value"]


class ProtocolError(Exception):
    """A request rejected with ``status`` and JSON ``body``.

    ``stage == "value"`` errors are the ones SGLang reports inside an SSE stream; ``stream`` says whether the request
    asked for one.
    """

    def __init__(self, status: int, body: Any, stage: ErrorStage, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.stage = stage
        self.message = message
        self.stream = False


def value_error(message: str) -> ProtocolError:
    """A tokenizer-manager ``ValueError`` / scheduler 400 abort: ``{"error": {"message": ...}}``."""
    return ProtocolError(400, {"error": {"message": message}}, "value", message)


def contract_error(message: str) -> ProtocolError:
    """A JSON-contract violation: ``{"error": "<message>"}`` (a string, not an object)."""
    return ProtocolError(400, {"error": message}, "contract", message)


def object_error_body(message: str, status: int, type_: str) -> dict[str, Any]:
    """SGLang's ``ErrorResponse`` shape, used for validation failures and HTTPExceptions."""
    return {"object": "error", "message": message, "type": type_, "param": None, "code": status}


def fastapi_error(errors: list[dict[str, Any]]) -> ProtocolError:
    """A FastAPI ``RequestValidationError`` turned into 400 by SGLang's handler (``str(exc) + " " + str(errors)``)."""
    plural = "s" if len(errors) != 1 else ""
    exc_str = f"{len(errors)} validation error{plural}:\n" + "".join(f"  {error!r}\n" for error in errors)
    message = f"{exc_str} {errors!r}"
    return ProtocolError(400, object_error_body(message, 400, "Bad Request"), "fastapi", message)


def sse_error_event(message: str) -> dict[str, Any]:
    """The event SGLang streams for a ``ValueError`` when ``stream`` is true."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}


_HTTP_FAULT_MESSAGES: Final[dict[int, str]] = {
    408: "Request timed out in the router queue.",
    429: "Too many requests: the router queue is full.",
    500: "Internal server error.",
    502: "Bad gateway: the upstream worker is unavailable.",
    503: "The request queue is full.",
    504: "Gateway timeout: the upstream worker did not respond in time.",
}


def http_fault_body(status: int, message: str | None = None) -> dict[str, Any]:
    """Body for an injected HTTP error; 503 is SGLang's exact queue-full body, the others are plausible."""
    text = message if message is not None else _HTTP_FAULT_MESSAGES.get(status, f"HTTP error {status}.")
    return object_error_body(text, status, str(status))


# -- messages -------------------------------------------------------------------------------------------------------


def input_too_long_message(prompt_tokens: int, context_length: int) -> str:
    """Tokenizer manager: prompt >= context length."""
    return f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context_length} tokens)."


def requested_too_many_message(prompt_tokens: int, max_new_tokens: int, context_length: int) -> str:
    """Tokenizer manager: prompt + explicit max_new_tokens >= context length."""
    return (
        f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
        f"You requested a total of {prompt_tokens + max_new_tokens} tokens: {prompt_tokens} tokens from the input "
        f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input "
        "messages or the completion to fit within the limit."
    )


def scheduler_input_length_message(prompt_tokens: int, max_req_input_len: int) -> str:
    """Scheduler ``validate_input_length``: prompt >= max_req_input_len."""
    return (
        f"Input length ({prompt_tokens} tokens) exceeds the maximum allowed length ({max_req_input_len} tokens). "
        "Use a shorter input or enable --allow-auto-truncate."
    )


def logprob_start_len_message(logprob_start_len: int, prompt_tokens: int) -> str:
    """Scheduler: logprob_start_len beyond the prompt."""
    return (
        f"req.logprob_start_len={logprob_start_len} is higher than the number of input tokens "
        f"len(req.origin_input_ids)={prompt_tokens}. Please use a smaller logprob_start_len."
    )


# -- finish reasons -------------------------------------------------------------------------------------------------


def finish_stop(matched: int | str) -> dict[str, Any]:
    """``FINISH_MATCHED_TOKEN`` / ``FINISH_MATCHED_STR``."""
    return {"type": "stop", "matched": matched}


def finish_length(length: int) -> dict[str, Any]:
    """``FINISH_LENGTH``."""
    return {"type": "length", "length": length}


def finish_abort(
    message: str = "Aborted", status_code: int | None = None, err_type: str | None = None
) -> dict[str, Any]:
    """``FINISH_ABORT``."""
    return {"type": "abort", "message": message, "status_code": status_code, "err_type": err_type}


# -- deterministic model outputs ------------------------------------------------------------------------------------


def token_logprob(token_id: int, position: int) -> float:
    """The engine's logprob for ``token_id`` at absolute sequence ``position``: negative, finite, deterministic."""
    # Same as -(h / 1000 + 0.001) with h the hash below, written so the floats print short (-5.936, not -5.9350..05).
    return -(((token_id * 2654435761 + position * 40503) % 10007) + 1) / 1000.0


def routed_experts_for(
    token_ids: Sequence[int], start_len: int, num_layers: int, top_k: int, num_experts: int
) -> np.ndarray[Any, np.dtype[np.int32]]:
    """Routed expert ids for positions ``start_len .. len(token_ids) - 2`` (the last token is never routed).

    Shape ``(max(0, len(token_ids) - 1 - start_len), num_layers, top_k)``, int32, values in ``[0, num_experts)``,
    distinct within each (position, layer) row and a pure function of (token id, position, layer).
    """
    rows = max(0, len(token_ids) - 1 - start_len)
    tokens = np.asarray(token_ids[start_len : start_len + rows], dtype=np.int64)
    positions = np.arange(start_len, start_len + rows, dtype=np.int64)
    base = (tokens * 2654435761 + positions * 40503) % num_experts
    layers = np.arange(num_layers, dtype=np.int64) * 7
    picks = np.arange(top_k, dtype=np.int64)
    experts = (base[:, None, None] + layers[None, :, None] + picks[None, None, :]) % num_experts
    return experts.astype(np.int32).reshape(rows, num_layers, top_k)


def encode_routed_experts(array: np.ndarray[Any, np.dtype[np.int32]]) -> str:
    """SGLang's encoding: base64 of the raw little-endian int32 bytes, C order, no header."""
    return base64.b64encode(np.ascontiguousarray(array, dtype="<i4").tobytes()).decode("ascii")


# -- FastAPI-level type checks --------------------------------------------------------------------------------------

_Checker = Callable[[Any, tuple[Any, ...]], list[dict[str, Any]]]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scalar(kind: str) -> _Checker:
    tests: dict[str, tuple[Callable[[Any], bool], str, str]] = {
        "int": (_is_int, "int_type", "Input should be a valid integer"),
        "bool": (lambda v: isinstance(v, bool), "bool_type", "Input should be a valid boolean"),
        "str": (lambda v: isinstance(v, str), "string_type", "Input should be a valid string"),
        "dict": (lambda v: isinstance(v, dict), "dict_type", "Input should be a valid dictionary"),
    }
    test, err_type, msg = tests[kind]

    def check(value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [] if test(value) else [{"type": err_type, "loc": loc, "msg": msg, "input": value}]

    return check


def _list_of(inner: _Checker) -> _Checker:
    def check(value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if not isinstance(value, list):
            return [{"type": "list_type", "loc": loc, "msg": "Input should be a valid list", "input": value}]
        errors: list[dict[str, Any]] = []
        for index, item in enumerate(value):
            errors.extend(inner(item, (*loc, index)))
        return errors

    return check


def _union(*members: tuple[str, _Checker]) -> _Checker:
    def check(value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        errors: list[dict[str, Any]] = []
        for name, member in members:
            member_errors = member(value, (*loc, name))
            if not member_errors:
                return []
            errors.extend(member_errors)
        return errors

    return check


_INT, _BOOL, _STR, _DICT = _scalar("int"), _scalar("bool"), _scalar("str"), _scalar("dict")
_INT_OR_LIST = _union(("list[int]", _list_of(_INT)), ("int", _INT))
_BOOL_OR_LIST = _union(("list[bool]", _list_of(_BOOL)), ("bool", _BOOL))
_STR_OR_LIST = _union(("list[str]", _list_of(_STR)), ("str", _STR))
_IDS_OR_BATCH = _union(("list[list[int]]", _list_of(_list_of(_INT))), ("list[int]", _list_of(_INT)))

# field -> (null allowed, checker); fields of GenerateReqInput that the engine reads or rejects.
_REQUEST_FIELDS: Final[dict[str, tuple[bool, _Checker]]] = {
    "text": (True, _STR_OR_LIST),
    "input_ids": (True, _IDS_OR_BATCH),
    "sampling_params": (True, _union(("list[dict[any,any]]", _list_of(_DICT)), ("dict[any,any]", _DICT))),
    "rid": (True, _STR_OR_LIST),
    "return_logprob": (True, _BOOL_OR_LIST),
    "logprob_start_len": (True, _INT_OR_LIST),
    "top_logprobs_num": (True, _INT_OR_LIST),
    "token_ids_logprob": (True, _IDS_OR_BATCH),
    "return_text_in_logprobs": (False, _BOOL),
    "stream": (False, _BOOL),
    "return_hidden_states": (False, _BOOL_OR_LIST),
    "return_routed_experts": (False, _BOOL),
    "routed_experts_start_len": (False, _INT),
    "return_prompt_token_ids": (False, _BOOL),
}


def _fastapi_checks(body: Any) -> None:
    if not isinstance(body, dict):
        raise fastapi_error(
            [
                {
                    "type": "dataclass_type",
                    "loc": ("body",),
                    "msg": "Input should be a dictionary or an instance of GenerateReqInput",
                    "input": body,
                }
            ]
        )
    errors: list[dict[str, Any]] = []
    for name, (nullable, checker) in _REQUEST_FIELDS.items():
        if name not in body or (nullable and body[name] is None):
            continue
        errors.extend(checker(body[name], ("body", name)))
    if errors:
        raise fastapi_error(errors)


# -- JSON-contract checks on sampling_params ------------------------------------------------------------------------

#: The contract's SamplingParams fields, in its order (also the order of the "unknown field" message).
SAMPLING_PARAM_KEYS: Final[dict[str, str]] = {
    "max_new_tokens": "i64",
    "stop": "str_or_list",
    "stop_token_ids": "i64_list",
    "stop_regex": "str_or_list",
    "temperature": "f64",
    "top_p": "f64",
    "top_k": "i64",
    "min_p": "f64",
    "frequency_penalty": "f64",
    "presence_penalty": "f64",
    "repetition_penalty": "f64",
    "min_new_tokens": "i64",
    "n": "i64",
    "json_schema": "str",
    "regex": "str",
    "ebnf": "str",
    "structural_tag": "str",
    "ignore_eos": "bool",
    "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool",
    "no_stop_trim": "bool",
    "stream_interval": "i64",
    "logit_bias": "f64_map",
    "sampling_seed": "i64",
    "custom_params": "any",
    "beam_width": "i64",
    "watermark": "any",
    "choice": "any",
}


def _unexpected(value: Any) -> str:
    """serde's description of an unexpected JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _invalid_type(value: Any, expected: str) -> ProtocolError:
    return contract_error(f"invalid type: {_unexpected(value)}, expected {expected}")


def _contract_value(kind: str, value: Any) -> None:  # noqa: C901  one branch per contract kind, read as a table
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "i64" and not _is_int(value):
        raise _invalid_type(value, "i64")
    if kind == "f64" and not is_number:
        raise _invalid_type(value, "f64")
    if kind == "bool" and not isinstance(value, bool):
        raise _invalid_type(value, "a boolean")
    if kind == "str" and not isinstance(value, str):
        raise _invalid_type(value, "a string")
    if kind == "str_or_list":
        if isinstance(value, list):
            for item in value:
                if not isinstance(item, str):
                    raise _invalid_type(item, "a string")
        elif not isinstance(value, str):
            raise _invalid_type(value, "a value or an array of values for StringOrList")
    if kind == "i64_list":
        if not isinstance(value, list):
            raise _invalid_type(value, "a sequence")
        for item in value:
            if not _is_int(item):
                raise _invalid_type(item, "i64")
    if kind == "f64_map":
        if not isinstance(value, dict):
            raise _invalid_type(value, "a map")
        for item in value.values():
            if not (isinstance(item, int | float) and not isinstance(item, bool)):
                raise _invalid_type(item, "f64")


def _contract_sampling(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise _invalid_type(params, "struct SamplingParams")
    keys = tuple(SAMPLING_PARAM_KEYS)
    for key, value in params.items():
        kind = SAMPLING_PARAM_KEYS.get(key)
        if kind is None:
            listed = ", ".join(f"`{k}`" for k in keys)
            raise contract_error(f"unknown field `{key}`, expected one of {listed}")
        if value is not None:
            _contract_value(kind, value)
    return params


# -- parsed request -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters the engine acts on (the rest are validated and ignored)."""

    max_new_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> SamplingParams:
        """Build from a contract-checked dict (``null`` means the default)."""
        stop = raw.get("stop")
        stop_tuple: tuple[str, ...] = () if stop is None else ((stop,) if isinstance(stop, str) else tuple(stop))

        def flag(name: str, default: bool) -> bool:
            value = raw.get(name)
            return default if value is None else bool(value)

        return cls(
            max_new_tokens=raw.get("max_new_tokens"),
            stop=tuple(s for s in stop_tuple if s),
            stop_token_ids=tuple(raw.get("stop_token_ids") or ()),
            ignore_eos=flag("ignore_eos", False),
            skip_special_tokens=flag("skip_special_tokens", True),
            no_stop_trim=flag("no_stop_trim", False),
            raw=dict(raw),
        )


def verify_sampling_params(params: SamplingParams) -> None:  # noqa: C901  SGLang's checks, one per parameter, in its order
    """``SamplingParams.verify``: raise the 400 ``ValueError`` SGLang gives for out-of-range values."""
    raw = params.raw

    def number(name: str, default: float) -> float:
        value = raw.get(name)
        return default if value is None else float(value)

    temperature = number("temperature", 1.0)
    top_p = number("top_p", 1.0)
    min_p = number("min_p", 0.0)
    top_k = raw.get("top_k")
    frequency_penalty = number("frequency_penalty", 0.0)
    presence_penalty = number("presence_penalty", 0.0)
    repetition_penalty = number("repetition_penalty", 1.0)
    min_new_tokens = raw.get("min_new_tokens") or 0
    max_new_tokens = params.max_new_tokens

    if temperature < 0.0 or math.isnan(temperature):
        raise value_error(f"temperature must be non-negative, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise value_error(f"top_p must be in (0, 1], got {top_p}.")
    if not 0.0 <= min_p <= 1.0:
        raise value_error(f"min_p must be in [0, 1], got {min_p}.")
    if top_k is not None and top_k != -1 and top_k < 1:
        raise value_error(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if not -2.0 <= frequency_penalty <= 2.0:
        raise value_error(f"frequency_penalty must be in [-2, 2], got {frequency_penalty}.")
    if not -2.0 <= presence_penalty <= 2.0:
        raise value_error(f"presence_penalty must be in [-2, 2], got {presence_penalty}.")
    if not 0.0 < repetition_penalty <= 2.0:
        raise value_error(f"repetition_penalty must be in (0, 2], got {repetition_penalty}.")
    if min_new_tokens < 0:
        raise value_error(f"min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}.")
    if max_new_tokens is not None:
        if max_new_tokens < 0:
            raise value_error(f"max_new_tokens must be at least 0, got {max_new_tokens}.")
        if min_new_tokens > max_new_tokens:
            raise value_error(f"min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], got {min_new_tokens}.")
    if sum(raw.get(key) is not None for key in _GRAMMAR_KEYS) > 1:
        raise value_error("Only one of json_schema, regex, ebnf, or structural_tag can be set.")


@dataclass(frozen=True)
class GenerateRequest:
    """A validated single (non-batch) ``/generate`` request."""

    rid: str
    input_ids: list[int] | None
    text: str | None
    stream: bool
    sampling: SamplingParams
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    token_ids_logprob: list[int] | None
    return_text_in_logprobs: bool
    return_routed_experts: bool
    routed_experts_start_len: int
    return_prompt_token_ids: bool
    image_data: list[str] | None = None


BATCH_UNSUPPORTED: Final[str] = "batch not supported by strands-tito engine"


def image_list(raw: Any) -> list[str] | None:
    """``image_data`` of a request body as a list (SGLang takes one item or a list), None when absent."""
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(item, str) for item in items):
        raise value_error("image_data must be a string or a non-empty list of strings (one request, no batch)")
    return list(items)


def parse_generate_request(body: Any) -> GenerateRequest:
    """Validate a decoded JSON body in SGLang's order (FastAPI types, then the contract, then ``ValueError``s).

    Raises:
        ProtocolError: with the body shape of the stage that rejected the request.
    """
    _fastapi_checks(body)
    raw_sampling = body.get("sampling_params")
    if isinstance(raw_sampling, list):
        for params in raw_sampling:
            _contract_sampling(params)
    elif raw_sampling is not None:
        _contract_sampling(raw_sampling)

    stream = bool(body.get("stream", False))
    try:
        return _normalize(body, raw_sampling)
    except ProtocolError as exc:
        exc.stream = stream
        raise


def _normalize(body: Mapping[str, Any], raw_sampling: Any) -> GenerateRequest:
    input_ids = body.get("input_ids")
    text = body.get("text")
    if body.get("input_embeds") is not None:
        raise value_error("input_embeds is not supported by strands-tito engine")
    for key in ("video_data", "audio_data"):
        if body.get(key) is not None:
            raise value_error(f"{key} (multimodal input) is not supported by strands-tito engine")
    if text is None and input_ids is None:
        raise value_error("Either text, input_ids or input_embeds should be provided.")
    batch = (
        (input_ids is not None and bool(input_ids) and isinstance(input_ids[0], list))
        or (input_ids is None and isinstance(text, list))
        or isinstance(raw_sampling, list)
        or isinstance(body.get("rid"), list)
        or any(isinstance(body.get(k), list) for k in ("return_logprob", "logprob_start_len", "top_logprobs_num"))
        or (isinstance(raw_sampling, dict) and (raw_sampling.get("n") or 1) > 1)
    )
    if batch:
        raise value_error(BATCH_UNSUPPORTED)
    if input_ids is not None and not input_ids:
        raise value_error("input_ids cannot be empty.")

    token_ids_logprob = body.get("token_ids_logprob")
    if token_ids_logprob is not None and token_ids_logprob and isinstance(token_ids_logprob[0], list):
        raise value_error(BATCH_UNSUPPORTED)

    return_logprob = bool(body.get("return_logprob") or False)
    start = body.get("logprob_start_len")
    logprob_start_len = -1 if (start is None or not return_logprob or start < 0) else int(start)
    rid = body.get("rid")
    return GenerateRequest(
        rid=rid if isinstance(rid, str) else uuid.uuid4().hex,
        input_ids=list(input_ids) if input_ids is not None else None,
        text=text if input_ids is None else None,
        stream=bool(body.get("stream", False)),
        sampling=SamplingParams.from_raw(raw_sampling or {}),
        return_logprob=return_logprob,
        logprob_start_len=logprob_start_len,
        top_logprobs_num=int(body.get("top_logprobs_num") or 0) if return_logprob else 0,
        token_ids_logprob=list(token_ids_logprob) if (token_ids_logprob is not None and return_logprob) else None,
        return_text_in_logprobs=bool(body.get("return_text_in_logprobs", False)),
        return_routed_experts=bool(body.get("return_routed_experts", False)),
        routed_experts_start_len=int(body.get("routed_experts_start_len", 0)),
        return_prompt_token_ids=bool(body.get("return_prompt_token_ids", False)),
        image_data=image_list(body.get("image_data")),
    )
