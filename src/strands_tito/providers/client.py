"""Async HTTP client for token-in/token-out servers: the transport, and SGLang's native API (`/generate`, ...).

The client only moves bytes and classifies failures; what a reply *means* for a trajectory is decided by the model
provider. Which failures are retried, and for how long, is one object: :class:`RetryPolicy`.
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
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
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
    ServerUnreachableError,
    ThrottledError,
)
from strands_tito.providers.connection_pool import ConnectionPool, HTTPConnectError, HTTPReply, HTTPTransportError

logger = logging.getLogger(__name__)

#: Default size of the connection pool.
DEFAULT_MAX_CONNECTIONS = 256
THROTTLING_STATUS_CODES = frozenset({429, 503})
# Substrings of the 400 messages for a prompt that can never fit: a retry cannot fix them. SGLang's tokenizer_manager
# and scheduler validation and its KV-pool check, then vLLM's.
CONTEXT_LENGTH_MARKERS = (
    "longer than the model's context length",
    "maximum context length",
    "exceeds the maximum allowed length",
    "too long after expanding",
    "exceeds the kv memory budget",
    "longer than the maximum model length",
    "exceeds model's maximum context length",
)


@dataclass(frozen=True)
class RetryPolicy:
    """Which failed requests the client retries, and for how long.

    Retried: every HTTP error status except a context-length 400, :attr:`never_retry_statuses` and a body holding
    one of :attr:`never_retry_markers`. That includes 500 and other 400s, which SGLang and the router in front of it
    answer while weights are reloaded between training steps (strands-sglang 0.6 retries them too), and
    408/429/502/503/504 (overload). Also retried: a connection that broke or timed out mid-request. A server that
    refuses connections (down, or restarting) is retried only for :attr:`unreachable_timeout` seconds, so a run
    pointed at the wrong port fails within seconds with a clear
    :class:`~strands_tito.errors.ServerUnreachableError`; raise it to ride out engine restarts. Never retried: a 200
    whose body is not JSON, a cancelled request. A generation the server aborted (HTTP 200 with finish reason
    ``abort``: what requests in flight get when weights are updated with ``abort_all_requests``) is sent again by
    the model provider only with :attr:`retry_aborted`, since an abort can also be a trainer ending a rollout.

    Delays grow exponentially from :attr:`backoff_base` to :attr:`backoff_max` with jitter; a ``Retry-After``
    header is honoured. Pass one to a client as ``SGLangClient(url, retry=RetryPolicy(...))``.

    Attributes:
        max_retries: Retries after the first attempt (refused connections are bounded by ``unreachable_timeout``).
        backoff_base: First delay in seconds; doubles each retry (strands-sglang 0.6's ``retry_delay``).
        backoff_max: Cap on one delay.
        deadline: Overall seconds one request may take, retries and waits included.
        never_retry_statuses: Statuses a retry cannot fix (401 unauthorized, 403 forbidden, 404 wrong URL).
        never_retry_markers: Body substrings of an error a retry cannot fix: SGLang's request-contract check (an
            unknown sampling parameter) and its sampling-parameter validation ("top_p must be in (0, 1], got 2.").
        unreachable_timeout: Seconds a server that refuses connections is retried before giving up.
        retry_aborted: Send a generation the server aborted again (within :attr:`max_retries`); off, the abort is
            raised (``SGLangAbortedError``) and nothing is recorded.
    """

    max_retries: int = 8
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    deadline: float = 1800.0
    never_retry_statuses: frozenset[int] = field(default_factory=lambda: frozenset({401, 403, 404}))
    never_retry_markers: tuple[str, ...] = ("unknown field", " must be ")
    unreachable_timeout: float = 2.0
    retry_aborted: bool = False

    def retryable(self, error: GenerationError) -> bool:
        """Whether a later attempt may succeed where this one failed with ``error``."""
        if isinstance(error, ContextLengthError):
            return False
        if isinstance(error, ServerHTTPError):
            return error.status not in self.never_retry_statuses and not any(
                marker in error.body for marker in self.never_retry_markers
            )
        return isinstance(error, ServerConnectionError)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): exponential with jitter."""
        delay = min(self.backoff_max, self.backoff_base * (2**attempt))
        return float(delay / 2 + random.uniform(0, delay / 2))


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
        return ContextLengthError(
            f"HTTP 400, the prompt does not fit the context: {body[:500]}", status=status, body=body
        )
    if status in THROTTLING_STATUS_CODES:
        return ThrottledError(f"HTTP {status}, the server is overloaded: {body[:500]}", status=status, body=body)
    return ServerHTTPError(f"HTTP {status}: {body[:500]}", status=status, body=body)


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
        retry: Which failures are retried and for how long (default: ``RetryPolicy()``).
        max_retries, backoff_base, backoff_max, deadline: Override that field of ``retry``.
        retry_delay: strands-sglang 0.6's name for ``backoff_base`` (there a fixed delay; here the first one).
    """

    #: The backend this client speaks to, as messages name it (each backend's client sets its own).
    backend_name: ClassVar[str] = "SGLang"

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        timeout: float | None = 600.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        max_retries: int | None = None,
        backoff_base: float | None = None,
        backoff_max: float | None = None,
        deadline: float | None = None,
        retry_delay: float | None = None,
    ) -> None:
        policy = retry or RetryPolicy()
        self.retry = replace(
            policy,
            max_retries=policy.max_retries if max_retries is None else max_retries,
            backoff_base=next((v for v in (retry_delay, backoff_base) if v is not None), policy.backoff_base),
            backoff_max=policy.backoff_max if backoff_max is None else backoff_max,
            deadline=policy.deadline if deadline is None else deadline,
        )
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self.timeout = timeout
        self.connect_timeout = connect_timeout
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
        self._reserved_tokens: int | None = None

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

    @property
    def max_retries(self) -> int:
        """:attr:`RetryPolicy.max_retries` of :attr:`retry`."""
        return self.retry.max_retries

    @property
    def retry_delay(self) -> float:
        """:attr:`RetryPolicy.backoff_base` of :attr:`retry` (strands-sglang 0.6's name)."""
        return self.retry.backoff_base

    async def _send(self, method: str, path: str, body: bytes | None) -> HTTPReply:
        if self._plain:
            try:
                return await self._lean_pool().request(method, path, body)
            except HTTPConnectError as e:
                raise ServerUnreachableError(f"cannot connect to {self.base_url}: {e}") from e
            except HTTPTransportError as e:
                # Refused/reset connections, timeouts and bodies cut short by the server.
                raise ServerConnectionError(f"{method} {self.base_url}{path} failed: {e}") from e
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            response = await self._client().request(method, path, content=body, headers=headers)
        except httpx.ConnectError as e:
            raise ServerUnreachableError(f"cannot connect to {self.base_url}: {e}") from e
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
        policy = self.retry
        start = time.monotonic()
        unreachable_since: float | None = None
        attempt = 0
        while True:
            retry_after: float | None = None
            attempt_start = time.monotonic()
            try:
                response = await self._send(method, path, body)
                if response.status >= 400:
                    retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                    raise classify_http_error(response.status, response.text)
                try:
                    return orjson.loads(response.content)
                except orjson.JSONDecodeError as e:
                    raise ReplyDecodingError(
                        f"{method} {path}: HTTP 200 with a body that is not JSON: {response.text[:200]!r}"
                    ) from e
            except (ServerConnectionError, ServerHTTPError) as error:
                # A refused connection is bounded by unreachable_timeout instead of max_retries.
                unreachable = isinstance(error, ServerUnreachableError)
                if not policy.retryable(error) or (attempt >= policy.max_retries and not unreachable):
                    raise
                delay = max(policy.delay(attempt), retry_after or 0.0)
                now = time.monotonic()
                if now - start + delay > policy.deadline:
                    raise
                if unreachable:
                    unreachable_since = attempt_start if unreachable_since is None else unreachable_since
                    if now - unreachable_since + delay > policy.unreachable_timeout:
                        raise ServerUnreachableError(
                            f"{error}; the server is down or not listening there (no connection for "
                            f"{now - unreachable_since:.1f}s; RetryPolicy(unreachable_timeout=...) waits longer, "
                            "e.g. through an engine restart)"
                        ) from error
                else:
                    unreachable_since = None
                logger.warning(
                    "attempt=<%d>, delay=<%.2f>, error=<%s> | retrying %s request",
                    attempt + 1,
                    delay,
                    error,
                    self.backend_name,
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
        **fields: Any,
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
            fields: Any other ``/generate`` field, sent as given (``lora_path``, ``return_hidden_states``,
                ``custom_params``, ...); ``stream`` is always false.
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
        if fields:
            payload.update(fields)
            payload["stream"] = False  # one JSON reply; a stream would not be read as one
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

    async def reserved_tokens(self) -> int:
        """Context an SGLang server with speculative decoding reserves per request for draft tokens, which
        ``/v1/models`` does not subtract: read from ``/server_info`` (``/get_server_info`` on older servers) with
        :func:`speculative_reservation`; 0 for a server without either route. Cached once known.

        Raises:
            GenerationError: The server could not be asked (asked again next time).
        """
        if self._reserved_tokens is None:
            info: Any = None
            for path in ("/server_info", "/get_server_info"):
                try:
                    info = await self.request_json("GET", path)
                    break
                except ServerHTTPError as e:
                    if e.status != 404:
                        raise
            self._reserved_tokens = speculative_reservation(info if isinstance(info, dict) else {})
        return self._reserved_tokens


#: SGLang's algorithms whose ``is_eagle()`` is true: EAGLE, EAGLE3, FROZEN_KV_MTP (``srt/speculative/
#: spec_info.py:102-109``) and NEXTN, an alias of EAGLE (``spec_registry.py:183``).
RESERVING_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "FROZEN_KV_MTP", "NEXTN"})


def speculative_reservation(server_info: Mapping[str, Any]) -> int:
    """SGLang's ``compute_num_reserved_tokens`` (``srt/managers/utils.py:484-500``) from ``/server_info``: for an
    EAGLE-like algorithm, max(``speculative_eagle_topk`` x ``speculative_num_steps``, the draft-token count), else 0.
    ``TokenizerManager._validate_one_request`` adds it to the prompt (``tokenizer_manager.py:1333-1378``), so a
    request fits only when prompt + reservation + ``max_new_tokens`` <= the context length."""
    algorithm = server_info.get("speculative_algorithm")
    if not isinstance(algorithm, str) or algorithm.upper() not in RESERVING_ALGORITHMS:
        return 0

    def number(key: str) -> int:
        value = server_info.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    drafts = max(number("speculative_num_draft_tokens"), number("max_speculative_num_draft_tokens"))
    return max(number("speculative_eagle_topk") * number("speculative_num_steps"), drafts)


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
