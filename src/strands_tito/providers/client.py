"""The backend-neutral HTTP transport of the token-in/token-out clients: pooling, retries, deadlines, cancellation.

:class:`TokenClient` knows no backend's routes: each backend's client (``SGLangClient`` in
:mod:`~strands_tito.providers.sglang_client`, ``VLLMClient`` in :mod:`~strands_tito.providers.vllm_client`) adds its
endpoints and its name, which every message, log line and error of the transport carries. The client only moves
bytes and classifies failures; what a reply *means* for a trajectory is decided by the model provider. Which failures
are retried, and for how long, is one object: :class:`RetryPolicy`.
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
from collections.abc import Callable, Coroutine
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

# Backoff jitter from the operating system's generator: never the ``random`` module's global state, which a user's
# seeded experiment owns, and distinct in forked workers (so they do not retry in step).
_JITTER = random.SystemRandom()
#: Default size of the connection pool.
DEFAULT_MAX_CONNECTIONS = 256
THROTTLING_STATUS_CODES = frozenset({429, 503})
# Substrings of the 400 messages for a prompt that can never fit: a retry cannot fix them. SGLang's tokenizer_manager
# and scheduler validation and its KV-pool check, then vLLM's (v0.32: the tokens endpoint's renderer, the OpenAI
# endpoints and get_max_tokens). One list for both: a router in front of either may pass the other's wording on.
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
        return float(delay / 2 + _JITTER.uniform(0, delay / 2))


def classify_http_error(status: int, body: str, *, source: str = "the server") -> ServerHTTPError:
    """Map an error status and body to the most specific :class:`ServerHTTPError` subclass.

    ``source`` opens the message: who answered, e.g. ``"SGLang (POST /generate)"``.
    """
    if status == 400 and any(marker in body.lower() for marker in CONTEXT_LENGTH_MARKERS):
        message = f"{source} returned HTTP 400, the prompt does not fit the context: {body[:500]}"
        return ContextLengthError(message, status=status, body=body)
    if status in THROTTLING_STATUS_CODES:
        message = f"{source} returned HTTP {status}, the server is overloaded: {body[:500]}"
        return ThrottledError(message, status=status, body=body)
    return ServerHTTPError(f"{source} returned HTTP {status}: {body[:500]}", status=status, body=body)


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
    """The transport every backend's client shares: pooling, retries, an overall deadline and cancellation.

    It holds no route of any backend: :class:`~strands_tito.providers.sglang_client.SGLangClient` and
    :class:`~strands_tito.providers.vllm_client.VLLMClient` derive from it, add their endpoints and set
    :attr:`backend_name`, which the transport's messages, logs and errors carry.

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
    backend_name: ClassVar[str] = "the server"

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
        # Plain http:// (the usual server or router address) goes through the lean keep-alive pool; https and
        # anything unusual through httpx.
        url = httpx.URL(self.base_url)
        self._plain = url.scheme == "http" and url.path in ("", "/") and url.host != ""
        self._address = (url.host, url.port or 80)
        self._max_model_len: int | None = None
        self.served_model: str | None = None
        """The model the server serves (``GET /v1/models``' id, once it has been asked and names one model)."""

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
        where = f"{self.backend_name} ({method} {self.base_url}{path})"
        if self._plain:
            try:
                return await self._lean_pool().request(method, path, body)
            except HTTPConnectError as e:
                raise ServerUnreachableError(f"cannot connect to {where}: {e}") from e
            except HTTPTransportError as e:
                # Refused/reset connections, timeouts and bodies cut short by the server.
                raise ServerConnectionError(f"{where} failed: {e}") from e
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            response = await self._client().request(method, path, content=body, headers=headers)
        except httpx.ConnectError as e:
            raise ServerUnreachableError(f"cannot connect to {where}: {e}") from e
        except (httpx.TransportError, httpx.DecodingError) as e:
            raise ServerConnectionError(f"{where} failed: {type(e).__name__}: {e}") from e
        return HTTPReply(response.status_code, dict(response.headers), response.content)

    def http_error(self, method: str, path: str, status: int, body: str) -> ServerHTTPError:
        """The error for an HTTP error reply, naming this backend and the route; a backend's client may add hints."""
        return classify_http_error(status, body, source=f"{self.backend_name} ({method} {path})")

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
                    raise self.http_error(method, path, response.status, response.text)
                try:
                    return orjson.loads(response.content)
                except orjson.JSONDecodeError as e:
                    raise ReplyDecodingError(
                        f"{self.backend_name} ({method} {path}): HTTP 200 with a body that is not JSON: "
                        f"{response.text[:200]!r}"
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

    async def post(
        self, path: str, payload: dict[str, Any], cancel_signal: threading.Event | None = None
    ) -> dict[str, Any]:
        """POST a JSON object with retries and return the reply object (not yet validated).

        Args:
            path: The backend's route.
            payload: The request body (``orjson.Fragment`` values are sent as they are).
            cancel_signal: When set while the request is in flight, the request is dropped (closing its connection,
                which makes SGLang and vLLM abort it) and :class:`RequestCancelledError` is raised.
        """
        request = self.request_json("POST", path, payload)
        what = f"{self.backend_name} request (POST {path})"
        reply = await (request if cancel_signal is None else until_cancelled(request, cancel_signal, what))
        if not isinstance(reply, dict):
            raise ReplyDecodingError(f"{what} returned a JSON {type(reply).__name__}, expected an object")
        return reply

    async def health(self) -> bool:
        """True when ``GET /health`` (served by SGLang and vLLM alike) answers 200; one attempt, no retries."""
        try:
            response = await self._send("GET", "/health", None)
        except ServerConnectionError:
            return False
        return response.status == 200

    async def max_model_len(self) -> int | None:
        """The served model's context length from the OpenAI-compatible ``GET /v1/models`` both backends serve
        (``data[].max_model_len``); None if the server does not say.

        Only a successful answer is cached: a transient failure raises now and is asked again next time.
        """
        if self._max_model_len is None:
            models = await self.request_json("GET", "/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            lengths = [m.get("max_model_len") for m in data or [] if isinstance(m, dict)]
            names = {m.get("id") for m in data or [] if isinstance(m, dict) and isinstance(m.get("id"), str)}
            self.served_model = names.pop() if len(names) == 1 else None  # a router serving several: unknown
            found = next((n for n in lengths if isinstance(n, int) and n > 0), None)
            if found is None:
                return None
            self._max_model_len = found
        return self._max_model_len


#: Seconds a cancel signal's watch thread waits without a request under it before it ends (the next request under
#: that signal starts a new one).
CANCEL_WATCH_IDLE = 30.0


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


async def until_cancelled[T](coro: Coroutine[Any, Any, T], cancel_signal: threading.Event, what: str = "request") -> T:
    """Await ``coro`` unless ``cancel_signal`` (a thread-safe flag) is set first; then cancel it.

    The flag is watched by a thread blocked on it (:class:`_CancelWatch`), so a request in flight costs the loop
    no wake-ups; setting the flag cancels the request at once. ``coro`` runs in the caller's task (no task of its
    own, which would cost a loop iteration per request): the watch cancels that task, and the cancellation is taken
    back here and raised as :class:`RequestCancelledError`.
    """
    task = asyncio.current_task()
    if task is None:  # not inside a task: nothing to cancel but the request itself
        return await _in_own_task(coro, cancel_signal, what)
    state = {"fired": False, "done": False}

    def fire() -> None:
        # Runs on the loop's thread, so it cannot interleave with the ``finally`` below.
        if not state["done"]:
            state["fired"] = True
            task.cancel()

    watch = _CancelWatch.register(cancel_signal, task, fire, idle=CANCEL_WATCH_IDLE)
    try:
        return await coro
    except asyncio.CancelledError:
        if state["fired"]:
            task.uncancel()
            raise RequestCancelledError(f"{what} cancelled by the caller's cancel signal") from None
        raise
    finally:
        state["done"] = True
        watch.discard(task)


async def _in_own_task[T](coro: Coroutine[Any, Any, T], cancel_signal: threading.Event, what: str) -> T:
    return await asyncio.ensure_future(until_cancelled(coro, cancel_signal, what))
