"""Async HTTP client for token-in/token-out servers: the transport, and SGLang's native API (`/generate`, ...).

The client only moves bytes and classifies failures; what a reply *means* for a trajectory is decided by the model
provider. Retries follow one rule: retry what a later attempt can fix (connection failures, 408/429/502/503/504),
never what it cannot (any other 4xx, a reply that is not JSON).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

import httpx
import orjson

from strands_tito.errors import (
    ContextLengthError,
    GenerationError,
    ReplyDecodingError,
    RequestCancelledError,
    ServerConnectionError,
    ServerHTTPError,
    ThrottledError,
)
from strands_tito.providers.connection_pool import ConnectionPool, HTTPReply, HTTPTransportError

logger = logging.getLogger(__name__)

RETRYABLE_STATUS_CODES = frozenset({408, 429, 502, 503, 504})
THROTTLING_STATUS_CODES = frozenset({429, 503})
# Substrings of SGLang's context-length 400 messages (tokenizer_manager and scheduler validation).
CONTEXT_LENGTH_MARKERS = (
    "longer than the model's context length",
    "maximum context length",
    "exceeds the maximum allowed length",
    "too long after expanding",
)


# The SGLang names of the backend-neutral generation errors (one class, two names; see strands_tito.errors).
SGLangClientError = GenerationError
SGLangHTTPError = ServerHTTPError
SGLangContextLengthError = ContextLengthError
SGLangThrottledError = ThrottledError
SGLangConnectionError = ServerConnectionError
SGLangDecodingError = ReplyDecodingError
SGLangCancelledError = RequestCancelledError


def classify_http_error(status: int, body: str) -> ServerHTTPError:
    """Map an error status and body to the most specific :class:`ServerHTTPError` subclass."""
    if status == 400 and any(marker in body.lower() for marker in CONTEXT_LENGTH_MARKERS):
        return ContextLengthError(status, body)
    if status in THROTTLING_STATUS_CODES:
        return ThrottledError(status, body)
    return ServerHTTPError(status, body)


def _retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class TokenClient:
    """Async client for one inference server with pooling, retries, an overall deadline and cancellation.

    The transport (:meth:`request_json`) serves every backend; :meth:`generate`, :meth:`model_info` and
    :meth:`is_multimodal` speak SGLang's native API. :class:`~strands_tito.providers.vllm.VLLMClient` adds vLLM's
    endpoints. ``SGLangClient`` is this class's documented name for SGLang users (one class, two names).

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:30000``.
        max_connections: Size of the connection pool; set it to the number of concurrent rollouts.
        timeout: Seconds to wait for one reply (a long generation counts against it); None waits forever.
        connect_timeout: Seconds to wait for a TCP connection.
        max_retries: Retries after the first attempt, for retryable failures only.
        backoff_base: First backoff delay in seconds; doubles each retry.
        backoff_max: Cap on one backoff delay.
        deadline: Overall seconds one :meth:`generate` call may take, retries and waits included.
        retry_delay: strands-sglang 0.6's name for ``backoff_base`` (there a fixed delay; here the first one).
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = 256,
        timeout: float | None = 600.0,
        connect_timeout: float = 5.0,
        max_retries: int = 8,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        deadline: float = 1800.0,
        retry_delay: float | None = None,
    ) -> None:
        if retry_delay is not None:
            backoff_base = retry_delay
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.deadline = deadline
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._pool: ConnectionPool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        # Plain http:// (the usual SGLang/router address) goes through the lean keep-alive pool; https and
        # anything unusual through httpx.
        url = httpx.URL(self.base_url)
        self._plain = url.scheme == "http" and url.path in ("", "/") and url.host != ""
        self._address = (url.host, url.port or 80)
        self._max_model_len: int | None = None
        self._is_multimodal: bool | None = None

    def _client(self) -> httpx.AsyncClient:
        # httpx pools are bound to the loop that opened them; a new loop (e.g. asyncio.run per rollout) gets a new
        # pool instead of failing with "attached to a different loop".
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop or self._http.is_closed:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
                limits=httpx.Limits(
                    max_connections=self.max_connections, max_keepalive_connections=self.max_connections
                ),
            )
            self._http_loop = loop
        return self._http

    def _lean_pool(self) -> ConnectionPool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            host, port = self._address
            self._pool = ConnectionPool(
                host,
                port,
                max_connections=self.max_connections,
                connect_timeout=self.connect_timeout,
                timeout=self.timeout,
            )
            self._pool_loop = loop
        return self._pool

    async def aclose(self) -> None:
        """Close the connection pools."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._pool is not None:
            await self._pool.aclose()
            self._pool = None

    async def close(self) -> None:
        """Same as :meth:`aclose` (strands-sglang 0.6's name)."""
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _backoff(self, attempt: int) -> float:
        delay = min(self.backoff_max, self.backoff_base * (2**attempt))
        return float(delay / 2 + random.uniform(0, delay / 2))

    async def _send(self, method: str, path: str, body: bytes | None) -> HTTPReply:
        if self._plain:
            try:
                return await self._lean_pool().request(method, path, body)
            except HTTPTransportError as e:
                # Refused/reset connections, timeouts and bodies cut short by the server.
                raise ServerConnectionError(f"{method} {self.base_url}{path} failed: {e}") from e
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            response = await self._client().request(method, path, content=body, headers=headers)
        except (httpx.TransportError, httpx.DecodingError) as e:
            raise ServerConnectionError(f"{method} {self.base_url}{path} failed: {type(e).__name__}: {e}") from e
        return HTTPReply(response.status_code, dict(response.headers), response.content)

    async def request_json(self, method: str, path: str, payload: Any = None) -> Any:
        """Send one request with retries and return the decoded JSON body.

        Raises:
            ContextLengthError, ThrottledError, ServerHTTPError, ServerConnectionError,
            ReplyDecodingError: see the class docstrings.
        """
        body = None if payload is None else orjson.dumps(payload)
        start = time.monotonic()
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                response = await self._send(method, path, body)
                if response.status >= 400:
                    error = classify_http_error(response.status, response.text)
                    if response.status not in RETRYABLE_STATUS_CODES:
                        raise error
                    retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                    raise error
                try:
                    return orjson.loads(response.content)
                except orjson.JSONDecodeError as e:
                    raise ReplyDecodingError(
                        f"{method} {path}: HTTP 200 with a body that is not JSON: {response.text[:200]!r}"
                    ) from e
            except (ServerConnectionError, ServerHTTPError) as error:
                retryable = isinstance(error, ServerConnectionError) or (
                    isinstance(error, ServerHTTPError) and error.status in RETRYABLE_STATUS_CODES
                )
                if not retryable or attempt >= self.max_retries:
                    raise
                delay = max(self._backoff(attempt), retry_after or 0.0)
                if time.monotonic() - start + delay > self.deadline:
                    raise
                logger.warning(
                    "attempt=<%d>, delay=<%.2f>, error=<%s> | retrying SGLang request", attempt + 1, delay, error
                )
                await asyncio.sleep(delay)
                attempt += 1

    async def generate(
        self,
        input_ids: Sequence[int],
        *,
        sampling_params: dict[str, Any] | None = None,
        return_logprob: bool = False,
        logprob_start_len: int = -1,
        return_routed_experts: bool = False,
        routed_experts_start_len: int = 0,
        image_data: list[str] | None = None,
        rid: str | None = None,
        cancel_signal: threading.Event | None = None,
        input_ids_json: bytes | None = None,
    ) -> dict[str, Any]:
        """POST ``/generate`` with token IDs and return the reply object (not yet validated).

        Args:
            input_ids: The whole prompt as token IDs.
            sampling_params: SGLang sampling parameters (``max_new_tokens``, ``temperature``, ...).
            return_logprob: Ask for logprobs.
            logprob_start_len: First prompt position to return input logprobs for; -1 means none.
            return_routed_experts: Ask for MoE routing (needs ``--enable-return-routed-experts`` on the server).
            routed_experts_start_len: First position whose routing is returned.
            image_data: Images for multimodal models.
            rid: Request id (echoed as ``meta_info.id``).
            cancel_signal: When set while the request is in flight, the request is dropped (closing its connection,
                which makes SGLang abort it) and :class:`RequestCancelledError` is raised.
            input_ids_json: ``input_ids`` already serialized as a JSON array (sent as it is).
        """
        payload: dict[str, Any] = {
            "input_ids": orjson.Fragment(input_ids_json)
            if input_ids_json is not None
            else (input_ids if isinstance(input_ids, list) else list(input_ids)),
            "sampling_params": sampling_params or {},
            "return_logprob": return_logprob,
            "logprob_start_len": logprob_start_len,
            "stream": False,
        }
        if return_routed_experts:
            payload["return_routed_experts"] = True
            payload["routed_experts_start_len"] = routed_experts_start_len
        if image_data:
            payload["image_data"] = image_data
        if rid is not None:
            payload["rid"] = rid
        request = self.request_json("POST", "/generate", payload)
        if cancel_signal is None:
            reply = await request
        else:
            reply = await until_cancelled(request, cancel_signal)
        if not isinstance(reply, dict):
            raise ReplyDecodingError(f"/generate returned a JSON {type(reply).__name__}, expected an object")
        return reply

    async def health(self) -> bool:
        """True when ``GET /health`` answers 200."""
        try:
            response = await self._send("GET", "/health", None)
        except ServerConnectionError:
            return False
        return response.status == 200

    async def model_info(self) -> dict[str, Any]:
        """``GET /model_info`` (model path, modality flags, ...)."""
        info = await self.request_json("GET", "/model_info")
        if not isinstance(info, dict):
            raise ReplyDecodingError("/model_info did not return a JSON object")
        return info

    async def max_model_len(self) -> int | None:
        """The served model's context length from ``GET /v1/models``; None if the server does not say.

        Only a successful answer is cached: a transient failure raises now and is asked again next time.
        """
        if self._max_model_len is None:
            models = await self.request_json("GET", "/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            lengths = [m.get("max_model_len") for m in data or [] if isinstance(m, dict)]
            found = next((n for n in lengths if isinstance(n, int) and n > 0), None)
            if found is None:
                return None
            self._max_model_len = found
        return self._max_model_len

    async def is_multimodal(self) -> bool:
        """Whether the model understands images (``/model_info`` ``has_image_understanding``); cached on success."""
        if self._is_multimodal is None:
            self._is_multimodal = bool((await self.model_info()).get("has_image_understanding", False))
        return self._is_multimodal


class _CancelWatch:
    """A thread blocked on one cancel signal that cancels the requests in flight under it when it is set.

    Strands hands the same ``threading.Event`` to every model call of an agent; a ``threading.Event`` cannot wake
    an event loop, and polling it from the loop costs one loop wake-up per check for as long as the request runs (on
    a shared VM about 0.2 ms of CPU each: several ms per model call of a second). The thread costs nothing while
    it waits; it serves every request under its signal and ends after ``idle`` seconds without one.
    """

    lock: ClassVar[threading.Lock] = threading.Lock()
    watches: ClassVar[dict[int, _CancelWatch]] = {}  # by id() of the signal; an entry holds its signal alive

    def __init__(self, signal: threading.Event, idle: float) -> None:
        self.signal = signal
        self.idle = idle
        self.pending: dict[asyncio.Task[Any], tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}
        threading.Thread(target=self.run, name="strands-tito-cancel-watch", daemon=True).start()

    @classmethod
    def register(
        cls, signal: threading.Event, task: asyncio.Task[Any], fire: Callable[[], None], idle: float = 30.0
    ) -> _CancelWatch:
        loop = asyncio.get_running_loop()
        with cls.lock:
            watch = cls.watches.get(id(signal))
            if watch is None or watch.signal is not signal:
                watch = cls.watches[id(signal)] = cls(signal, idle)
            watch.pending[task] = (loop, fire)
        return watch

    def discard(self, task: asyncio.Task[Any]) -> None:
        with self.lock:
            self.pending.pop(task, None)

    @classmethod
    def after_fork(cls) -> None:
        """A forked child has none of the parent's watcher threads: it starts with no watches."""
        cls.lock = threading.Lock()
        cls.watches = {}

    def run(self) -> None:
        while True:
            fired = self.signal.wait(self.idle)
            with self.lock:
                if not fired and self.pending:
                    continue
                if self.watches.get(id(self.signal)) is self:
                    del self.watches[id(self.signal)]
                pending, self.pending = self.pending, {}
            for loop, fire in pending.values():
                with contextlib.suppress(RuntimeError):  # a closed loop: nothing left to cancel there
                    loop.call_soon_threadsafe(fire)
            return


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_CancelWatch.after_fork)


async def until_cancelled[T](coro: Coroutine[Any, Any, T], cancel_signal: threading.Event) -> T:
    """Await ``coro`` unless ``cancel_signal`` (a thread-safe flag) is set first; then cancel it.

    The flag is watched by a thread blocked on it (:class:`_CancelWatch`), so a request in flight costs the loop
    no wake-ups; setting the flag cancels the request at once. ``coro`` runs in the caller's task (no task of its
    own, which would cost a loop iteration per request): the watch cancels that task, and the cancellation is taken
    back here and raised as :class:`RequestCancelledError`.
    """
    task = asyncio.current_task()
    if task is None:  # not inside a task: nothing to cancel but the request itself
        return await _in_own_task(coro, cancel_signal)
    state = {"fired": False, "done": False}

    def fire() -> None:
        # Runs on the loop's thread, so it cannot interleave with the ``finally`` below.
        if not state["done"]:
            state["fired"] = True
            task.cancel()

    watch = _CancelWatch.register(cancel_signal, task, fire)
    try:
        return await coro
    except asyncio.CancelledError:
        if state["fired"]:
            task.uncancel()
            raise RequestCancelledError("request cancelled by the caller's cancel signal") from None
        raise
    finally:
        state["done"] = True
        watch.discard(task)


async def _in_own_task[T](coro: Coroutine[Any, Any, T], cancel_signal: threading.Event) -> T:
    return await asyncio.ensure_future(until_cancelled(coro, cancel_signal))


#: The documented name for SGLang users (and strands-sglang 0.6's): the same class as :class:`TokenClient`.
SGLangClient = TokenClient
