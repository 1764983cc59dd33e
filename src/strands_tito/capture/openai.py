"""Token capture for stock agents: Strands' ``OpenAIModel`` against a vLLM or SGLang OpenAI-compatible server.

:func:`instrument_openai_model` wraps ``strands.models.openai.OpenAIModel`` (the class, so agent code does not change).
While capture is on -- the conditions of :func:`~strands_tito.capture.recorder.record_turn`: a recording span is current
(Strands' ``chat`` span inside ``stream``) and ``STRANDS_TITO_CAPTURE`` is not ``0`` -- each chat completion asks the
server for token ids and is recorded exactly, as one ``call`` span kind on its ``chat`` span (see
:func:`~strands_tito.spans.call_attributes`): the whole prompt the server rendered and tokenized, the output ids,
the output logprobs when the request asked for ``logprobs`` (absent otherwise), the finish reason, the call's index and
the agent's trajectory id. With capture off nothing is added to the request.

How it works:

* ``OpenAIModel.stream`` is wrapped. The wrapper keeps a per-agent :class:`CallLog` (trajectory id, call count,
  totals) in the ``model_state`` Strands passes to ``stream`` (a dict that Strands deep-copies around each call and
  that hands out itself, as ``SGLangModel`` keeps its trajectory), and steps the original generator with a context
  variable set, so that:
* ``OpenAIModel._get_client`` (also wrapped) hands the original method's client out behind a thin proxy whose
  ``chat.completions.create`` adds ``return_token_ids: true`` to ``extra_body`` (merged with any the user set) and
  reads the token ids from the reply, whatever the server's field names: vLLM's top-level ``prompt_token_ids`` and
  ``choices[0].token_ids`` (streamed: prompt ids in the first chunk, ids per chunk), or SGLang's
  ``choices[0].prompt_token_ids`` / ``choices[0].response_token_ids``. The stream object Strands iterates is wrapped,
  not replaced, so it sees exactly the chunks the server sent.
* When the stream ends the call goes on the current (``chat``) span with
  :func:`~strands_tito.capture.recorder.record_call`. The trajectory's end signal (counting calls) is emitted when the
  agent is garbage-collected, at exit, or by :func:`end_trajectory_of`; the assembler then reports whether consecutive
  calls share a prefix (they may not: the server re-renders the history from text).

SGLang rejects ``return_token_ids`` on a streaming chat request (400). ``STRANDS_TITO_OPENAI_FLAVOR`` decides:

* ``auto`` (default): ask as if the server streams ids (vLLM); on SGLang's 400 naming ``return_token_ids`` the call
  is repeated once without streaming, and that server (by base URL) is asked without streaming from then on;
* ``sglang``: streaming calls are sent non-streaming from the start (no failed request);
* ``vllm``: always stream; a 400 is the caller's.

A call sent non-streaming on behalf of a streaming ``OpenAIModel`` is handed to Strands as a replayed stream (one
chunk with the whole message and the finish reason, then usage), so the agent sees the same events, only not
incrementally. Requests to OpenAI's own platform (``api.openai.com``, Azure OpenAI, Bedrock) are never changed: those
reject unknown fields and return no token ids. ``structured_output`` is not recorded.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
import weakref
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry import trace

from strands_tito import checks
from strands_tito.capture import recorder as capture
from strands_tito.settings import get_settings, variable
from strands_tito.trajectory import pack_int32
from strands_tito.upstream import UpstreamChangedError, strands_sdk

logger = logging.getLogger(__name__)

__all__ = [
    "ENV_FLAVOR",
    "STATE_KEY",
    "CallLog",
    "call_log_of",
    "end_trajectory_of",
    "instrument_openai_model",
    "is_openai_model_instrumented",
    "trajectory_id_of",
    "uninstrument_openai_model",
]

ENV_FLAVOR: Final[str] = variable("openai_flavor").name
STATE_KEY: Final[str] = "strands_tito_openai"
#: Hosts that reject unknown request fields and never return token ids.
_PLATFORM_HOSTS: Final[tuple[str, ...]] = ("api.openai.com", ".openai.azure.com", ".amazonaws.com")
_CHUNK_FINISH_REASONS: Final[frozenset[str]] = frozenset(
    {"stop", "length", "tool_calls", "content_filter", "function_call"}
)

_lock = threading.Lock()
_current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("strands_tito_openai_call", default=None)
_default_states: weakref.WeakKeyDictionary[Any, _CallState] = weakref.WeakKeyDictionary()
#: Base URLs that answered SGLang's 400 to streamed token ids (``auto`` flavour).
_no_streamed_ids: set[str] = set()


class CallLog:
    """One agent's trajectory of calls: its id and the totals its end signal carries (see
    :class:`~strands_tito.capture.recorder.CallSequence`)."""

    def __init__(self) -> None:
        self.trajectory_id = uuid.uuid4().hex
        self.calls = 0
        self.length = 0
        self.crc32 = 0

    def add(self, prompt_ids: list[int], output_ids: list[int]) -> int:
        """Count one recorded call; returns its index."""
        index = self.calls
        self.calls += 1
        self.length += len(prompt_ids) + len(output_ids)
        self.crc32 = zlib.crc32(pack_int32(output_ids), zlib.crc32(pack_int32(prompt_ids), self.crc32))
        return index

    def end_totals(self) -> tuple[int, int, int]:
        """``(calls, tokens, crc32)`` for the end signal."""
        return self.calls, self.length, self.crc32


class _CallState(capture.AgentState):
    """A stock ``OpenAIModel`` agent's capture state: its trajectory is a :class:`CallLog`."""

    def __init__(self) -> None:
        self.log = CallLog()
        super().__init__(self.log)


# -- reading token ids from replies ---------------------------------------------------------------------------------


def _get(obj: Any, name: str) -> Any:
    """A field of an SDK object (extra fields included) or of a plain dict."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _ids(value: Any) -> list[int] | None:
    """Token ids under the one rule (:func:`strands_tito.checks.is_token_id_list`: int32, non-negative), else None."""
    ids = list(value) if isinstance(value, tuple) else value
    return list(ids) if checks.is_token_id_list(ids) else None


def _logprob_values(logprobs: Any) -> list[float | None] | None:
    """The reply's logprobs, each a real one under :mod:`strands_tito.checks` or None: not a number float32 holds
    finitely, or vLLM's floor for a missing one (the caller then records the call without logprobs)."""
    content = _get(logprobs, "content")
    if not isinstance(content, list):
        return None
    values: list[float | None] = []
    for entry in content:
        try:
            values.append(checks.logprob_value(_get(entry, "logprob"), "logprobs.content", ValueError))
        except ValueError:
            values.append(None)
    return checks.logprob_floor_as_missing(values)


@dataclass
class _Call:
    """One chat completion's token data, gathered from its reply."""

    flavor: str
    requested: bool = False
    request_id: str | None = None
    prompt_ids: list[int] | None = None
    output_ids: list[int] = field(default_factory=list)
    saw_output_ids: bool = False
    logprobs: list[float | None] = field(default_factory=list)
    saw_logprobs: bool = False
    finish_reason: str | None = None
    problem: str | None = None

    def _choice(self, choice: Any) -> None:
        prompt = _get(choice, "prompt_token_ids")  # SGLang
        if prompt is not None and self.prompt_ids is None:
            self.prompt_ids = _ids(prompt)
            if self.prompt_ids is None:
                self.problem = "prompt_token_ids is not a list of token ids"
        output = _get(choice, "token_ids")  # vLLM
        if output is None:
            output = _get(choice, "response_token_ids")  # SGLang
        if output is not None:
            ids = _ids(output)
            if ids is None:
                self.problem = "the output token ids are not a list of token ids"
            else:
                self.output_ids.extend(ids)
                self.saw_output_ids = True
        logprobs = _logprob_values(_get(choice, "logprobs"))
        if logprobs is not None:
            self.logprobs.extend(logprobs)
            self.saw_logprobs = True
        finish = _get(choice, "finish_reason")
        if isinstance(finish, str) and finish:
            self.finish_reason = finish

    def _top(self, reply: Any) -> list[Any]:
        if self.request_id is None and isinstance(_get(reply, "id"), str):
            self.request_id = _get(reply, "id")
        prompt = _get(reply, "prompt_token_ids")  # vLLM
        if prompt is not None and self.prompt_ids is None:
            self.prompt_ids = _ids(prompt)
            if self.prompt_ids is None:
                self.problem = "prompt_token_ids is not a list of token ids"
        choices = _get(reply, "choices")
        return [c for c in choices if _get(c, "index") in (0, None)] if isinstance(choices, list) else []

    def observe_completion(self, reply: Any) -> None:
        """A whole (non-streaming) chat completion."""
        for choice in self._top(reply)[:1]:
            self._choice(choice)

    def observe_chunk(self, chunk: Any) -> None:
        """One streamed chunk (ids and logprobs are per-chunk deltas)."""
        for choice in self._top(chunk)[:1]:
            self._choice(choice)

    def result(self) -> tuple[list[int], list[int], list[float | None] | None, str] | None:
        """``(prompt_ids, output_ids, output_logprobs, finish_reason)``, or None (with :attr:`problem` set);
        ``output_logprobs`` None: not asked for, or not a real one for every token (the call records none)."""
        if self.problem is None and self.prompt_ids is None:
            self.problem = "the server returned no prompt token ids (does it support return_token_ids?)"
        if self.problem is None and not self.saw_output_ids:
            self.problem = "the server returned no output token ids (does it support return_token_ids?)"
        if self.problem is not None or self.prompt_ids is None:
            return None
        logprobs: list[float | None] | None = None
        if self.saw_logprobs:
            if len(self.logprobs) == len(self.output_ids) and None not in self.logprobs:
                logprobs = list(self.logprobs)
            elif len(self.logprobs) == len(self.output_ids):
                # A generated token without its real logprob is never training data (strands_tito.checks).
                logger.warning(
                    "position=<%d> | the server sent no finite logprob for a generated token; recording the call "
                    "without logprobs",
                    self.logprobs.index(None),
                )
            else:
                logger.warning(
                    "logprobs=<%d>, output_ids=<%d> | the server's logprobs do not align with its token ids; "
                    "recording the call without logprobs",
                    len(self.logprobs),
                    len(self.output_ids),
                )
        return self.prompt_ids, self.output_ids, logprobs, self.finish_reason or "stop"


# -- the client proxy -----------------------------------------------------------------------------------------------


class _ObservedStream:
    """The server's stream, handed to Strands unchanged, each chunk read on the way (iterable more than once: Strands
    breaks out at the finish reason, then drains the rest for usage)."""

    def __init__(self, source: Any, call: _Call | None) -> None:
        self._source = source
        self._call = call
        self._iterator: AsyncIterator[Any] | None = None

    def __aiter__(self) -> _ObservedStream:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._source.__aiter__()
        chunk = await self._iterator.__anext__()
        if self._call is not None:
            self._call.observe_chunk(chunk)
        return chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def _replayed_chunks(reply: Any, include_usage: bool) -> AsyncIterator[Any]:
    """A non-streaming completion as the chunks a streaming one would have ended with."""
    from openai.types.chat import ChatCompletionChunk

    async def chunks() -> AsyncGenerator[Any, None]:
        choices = _get(reply, "choices") or []
        if choices:
            choice, message = choices[0], _get(choices[0], "message")
            delta: dict[str, Any] = {"role": "assistant", "content": _get(message, "content")}
            reasoning = _get(message, "reasoning_content") or _get(message, "reasoning")
            if reasoning:
                delta["reasoning_content"] = reasoning
            tool_calls = _get(message, "tool_calls") or []
            if tool_calls:
                delta["tool_calls"] = [
                    {
                        "index": index,
                        "id": _get(call, "id"),
                        "type": "function",
                        "function": {
                            "name": _get(_get(call, "function"), "name"),
                            "arguments": _get(_get(call, "function"), "arguments"),
                        },
                    }
                    for index, call in enumerate(tool_calls)
                ]
            finish = _get(choice, "finish_reason")
            yield ChatCompletionChunk.model_validate(
                {
                    "id": _get(reply, "id") or "",
                    "object": "chat.completion.chunk",
                    "created": _get(reply, "created") or 0,
                    "model": _get(reply, "model") or "",
                    "choices": [
                        {
                            "index": 0,
                            "delta": delta,
                            "finish_reason": finish if finish in _CHUNK_FINISH_REASONS else "stop",
                        }
                    ],
                }
            )
        usage = _get(reply, "usage")
        if include_usage and usage is not None:
            yield ChatCompletionChunk.model_validate(
                {
                    "id": _get(reply, "id") or "",
                    "object": "chat.completion.chunk",
                    "created": _get(reply, "created") or 0,
                    "model": _get(reply, "model") or "",
                    "choices": [],
                    "usage": usage.model_dump() if hasattr(usage, "model_dump") else dict(usage),
                }
            )

    return chunks()


def _is_platform(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return any(host == suffix or host.endswith(suffix) for suffix in _PLATFORM_HOSTS)


def _rejects_streamed_ids(error: Exception) -> bool:
    text = str(error)
    return "return_token_ids" in text and "stream" in text


async def _create(completions: Any, client: Any, call: _Call, request: dict[str, Any]) -> Any:
    base_url = str(getattr(client, "base_url", "") or "")
    if _is_platform(base_url):
        return await completions.create(**request)
    import openai

    body = dict(request)
    body["extra_body"] = {**dict(request.get("extra_body") or {}), "return_token_ids": True}
    call.requested = True
    stream = bool(body.get("stream"))
    if stream and (call.flavor == "sglang" or (call.flavor == "auto" and base_url in _no_streamed_ids)):
        return await _unstreamed(completions, body, call)
    try:
        reply = await completions.create(**body)
    except openai.BadRequestError as error:
        if not (stream and call.flavor == "auto" and _rejects_streamed_ids(error)):
            raise
        logger.info(
            "base_url=<%s> | the server does not stream token ids (SGLang); asking it without streaming", base_url
        )
        _no_streamed_ids.add(base_url)
        return await _unstreamed(completions, body, call)
    if stream:
        return _ObservedStream(reply, call)
    call.observe_completion(reply)
    return reply


async def _unstreamed(completions: Any, body: dict[str, Any], call: _Call) -> Any:
    stream_options = body.pop("stream_options", None) or {}
    body["stream"] = False
    reply = await completions.create(**body)
    call.observe_completion(reply)
    return _ObservedStream(_replayed_chunks(reply, bool(_get(stream_options, "include_usage"))), None)


class _Delegate:
    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class _Completions(_Delegate):
    def __init__(self, target: Any, client: Any, call: _Call) -> None:
        super().__init__(target)
        self._client = client
        self._call = call

    async def create(self, **request: Any) -> Any:
        return await _create(self._target, self._client, self._call, request)


class _Chat(_Delegate):
    def __init__(self, target: Any, client: Any, call: _Call) -> None:
        super().__init__(target)
        self.completions = _Completions(target.completions, client, call)


class _Client(_Delegate):
    def __init__(self, target: Any, call: _Call) -> None:
        super().__init__(target)
        self.chat = _Chat(target.chat, target, call)


# -- the wrappers ---------------------------------------------------------------------------------------------------


def _state(model: Any, model_state: dict[str, Any] | None) -> _CallState:
    if model_state is None:
        with _lock:
            state = _default_states.get(model)
            if state is None:
                state = _default_states[model] = _CallState()
        return state
    found = model_state.get(STATE_KEY)
    if isinstance(found, _CallState):
        return found
    state = _CallState()
    model_state[STATE_KEY] = state
    return state


def _record(model: Any, state: _CallState, call: _Call) -> None:
    if not call.requested:
        return
    result = call.result()
    if result is None:
        logger.warning("trajectory_id=<%s>, problem=<%s> | call not recorded", state.log.trajectory_id, call.problem)
        return
    prompt_ids, output_ids, logprobs, finish_reason = result
    config = getattr(model, "config", None)
    model_id = config.get("model_id") if isinstance(config, Mapping) else None
    recorded = capture.record_call(
        state.log,
        state.log.calls,
        prompt_ids,
        output_ids,
        logprobs,
        finish_reason=finish_reason,
        model_id=str(model_id) if model_id is not None else None,
        request_id=call.request_id,
        agent=state,
    )
    if recorded:
        state.log.add(prompt_ids, output_ids)


def _wrap_stream(original: Any) -> Any:
    async def stream(self: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        if not (trace.get_current_span().is_recording() and capture.capture_enabled()):
            async for event in original(self, *args, **kwargs):
                yield event
            return
        state = _state(self, kwargs.get("model_state"))
        state.note_agent((kwargs.get("invocation_state") or {}).get("agent"))
        call = _Call(flavor=get_settings().openai_flavor)
        inner = original(self, *args, **kwargs)
        try:
            while True:
                # Set only while the original runs (never across our own yield), so it cannot leak to the caller.
                token = _current.set(call)
                try:
                    event = await inner.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    _current.reset(token)
                yield event
        finally:
            await inner.aclose()
        _record(self, state, call)

    stream.__wrapped__ = original  # type: ignore[attr-defined]
    stream.__doc__ = original.__doc__
    stream.__name__ = "stream"
    stream.__qualname__ = getattr(original, "__qualname__", "stream")
    return stream


def _wrap_get_client(original: Any) -> Any:
    @asynccontextmanager
    async def _get_client(self: Any) -> AsyncIterator[Any]:
        async with original(self) as client:
            call = _current.get()
            yield client if call is None else _Client(client, call)

    _get_client.__wrapped__ = original  # type: ignore[attr-defined]
    return _get_client


def instrument_openai_model() -> bool:
    """Wrap ``strands.models.openai.OpenAIModel`` so calls record their token ids while capture is on.

    Idempotent and cheap; call it wherever capture is switched on. Returns False (and changes nothing) when Strands'
    OpenAI provider cannot be imported (the ``openai`` package is missing) or no longer has what capture wraps.
    """
    try:
        return strands_sdk.wrap_openai_model(_wrap_stream, _wrap_get_client)
    except UpstreamChangedError as error:
        logger.warning("stock OpenAIModel calls will not be recorded: %s", error)
        return False


def uninstrument_openai_model() -> None:
    """Undo :func:`instrument_openai_model`."""
    strands_sdk.unwrap_openai_model()


def is_openai_model_instrumented() -> bool:
    """Whether :func:`instrument_openai_model` is in effect."""
    return strands_sdk.openai_model_wrapped()


def call_log_of(agent: Any) -> CallLog | None:
    """The :class:`CallLog` of an agent using a stock ``OpenAIModel`` (None before its first recorded call)."""
    state = (strands_sdk.model_state(agent) or {}).get(STATE_KEY)
    return state.log if isinstance(state, _CallState) else None


def trajectory_id_of(agent: Any) -> str | None:
    """The trajectory id an agent's calls carry (None before its first call)."""
    log = call_log_of(agent)
    return log.trajectory_id if log is not None else None


def end_trajectory_of(agent: Any, reason: str = "reset") -> None:
    """End an agent's call trajectory now (emit its end signal); its next call starts a new trajectory."""
    state = (strands_sdk.model_state(agent) or {}).pop(STATE_KEY, None)
    if isinstance(state, _CallState):
        capture.end_trajectory(state.log, reason)
