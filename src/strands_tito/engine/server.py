"""``LocalEngine``: a protocol-faithful stand-in for an SGLang 0.5.23 server that replays scripted replies.

It speaks SGLang's native HTTP protocol (``/generate`` plus the health/info/cache endpoints), tracks conversations by
token prefix like a radix cache, emits deterministic logprobs and routed-expert ids, and can inject the faults a real
deployment produces (HTTP errors, context overflows, aborts, malformed bodies, slow replies).  Every exchange is kept
as an :class:`EngineRecord` so tests can compare exactly which tokens went in and came out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

from transformers import PreTrainedTokenizerBase

from .conversations import Conversation, ConversationTracker
from .http import (
    DEFAULT_MAX_BODY,
    AnyResponse,
    Connection,
    HttpServer,
    RawResponse,
    Request,
    Response,
    StreamResponse,
    empty_response,
    json_response,
    text_response,
)
from .images import DEFAULT_IMAGE_TOKEN, check_image_data
from .outputs import Outcome, OutputBuilder
from .protocol import (
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
from .script import DEFAULT_REPLY, Fault, Reply, Script, ScriptFile, Step

if TYPE_CHECKING:
    from .openai_chat import OpenAIFlavor

__all__ = ["EngineRecord", "LocalEngine"]

logger = logging.getLogger(__name__)

NO_SCRIPT_MESSAGE: Final[str] = "strands-tito engine: no scripted reply for this request"
FLUSH_OK: Final[str] = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
FLUSH_BUSY: Final[str] = (
    "Cache not flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
SGLANG_VERSION: Final[str] = "0.5.23"
#: Status recorded for a request whose client hung up before the reply (nothing is sent).
DISCONNECTED_STATUS: Final[int] = 499
_NON_JSON_BODY: Final[str] = "<html><body><h1>502 Bad Gateway</h1>upstream sent an invalid response</body></html>"


@dataclass
class EngineRecord:
    """One request the engine received and what it answered.

    Attributes:
        rid: the request id (``meta_info.id``) for ``/generate``; the aborted rid for ``/abort_request``.
        path, method: the HTTP route.
        request: the parsed JSON body (raw text if it was not JSON; None if empty).
        status: the HTTP status sent (499 when the client disconnected first and nothing was sent).
        response: the parsed JSON body, the raw text, or for SSE the list of parsed events (``"[DONE]"`` last).
        input_ids: the prompt token ids the engine received (after tokenizing ``text`` input).
        output_ids: the token ids the engine generated (also for malformed or aborted replies).
        output_logprobs: the engine's logprob for each output id.
        conversation: the conversation index (0, 1, ...) the request was attributed to.
        cached_tokens: the ``meta_info.cached_tokens`` reported.
        disconnected: the client went away before the reply.
        fault: the injected fault (``"http:503"``, ``"malformed:nan_logprob"``, ...), if any.
        unscripted: answered with the default reply (or the no-script 400) because no scripted step was left.
        script: index of the script the conversation is following (in order of addition), if any.
        received_at: ``time.time()`` when the request arrived.
        image_data: the ``image_data`` list the request carried (data URLs, in order), if any.
    """

    rid: str | None
    path: str
    method: str
    request: Any
    status: int
    response: Any
    input_ids: list[int] | None = None
    output_ids: list[int] | None = None
    output_logprobs: list[float | None] | None = None
    conversation: int | None = None
    cached_tokens: int | None = None
    disconnected: bool = False
    fault: str | None = None
    unscripted: bool = False
    script: int | None = None
    received_at: float = 0.0
    image_data: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of all fields."""
        return dataclasses.asdict(self)


@dataclass(eq=False)
class _Flight:
    rid: str
    aborted: asyncio.Event = field(default_factory=asyncio.Event)


class _Disconnected(Exception):
    """The client went away while the request was waiting."""


def _parse_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


def _parse_response_body(response: Response) -> Any:
    if not response.body:
        return ""
    if (response.content_type or "").startswith("application/json"):
        try:
            return json.loads(response.body)
        except ValueError:
            pass
    return response.body.decode("utf-8", errors="replace")


def _sse(payload: Any, *, allow_nan: bool = False) -> bytes:
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan)
    return f"data: {data}\n\n".encode()


_SSE_DONE: Final[bytes] = b"data: [DONE]\n\n"


async def _iterate(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


RouteHandler = Callable[[Request, Connection, float], Awaitable[AnyResponse]]


class LocalEngine:
    """A local SGLang-protocol server that replays scripted replies.

    Args:
        tokenizer: any ``transformers`` tokenizer; it encodes ``text`` replies/prompts and decodes output text.
        scripts: scripts handed out to new conversations, first unused match first.
        default: the reply for requests with no scripted step left (None: answer 400 instead).
        context_length: the model context length (length validation, ``/v1/models`` ``max_model_len``).
        model_path: served model name / model path reported by the info endpoints.
        routed_experts: ``(num_layers, top_k, num_experts)`` to emulate ``--enable-return-routed-experts``.
        host, port: where to listen (port 0 picks a free port; see :attr:`base_url` after starting).
        eos_token_ids: the model's stop ids (default: the tokenizer's eos id); the first one ends ``text`` replies.
        record_path: append every record as a JSON line to this file.
        max_body: largest accepted request body (bigger ones get 413).
        openai_flavor: which server ``/v1/chat/completions`` imitates (``"vllm"`` or ``"sglang"``): the field names
            of token ids and whether ``return_token_ids`` may stream (see :mod:`~strands_tito.engine.openai_chat`).
        reasoning_parser: ``"qwen3"`` to split ``...</think>`` off chat replies as reasoning (None: keep it in
            the content, like a server started without ``--reasoning-parser``).
        image_understanding: report ``has_image_understanding: true`` on ``/model_info`` and accept ``image_data``
            (base64 image data URLs, one per ``image_token`` in ``input_ids``; placeholders are not expanded).
        image_token: the image placeholder token of the served template.

    Run it in a background thread with :meth:`start` / :meth:`stop` (or ``with LocalEngine(...) as engine``), or
    inside the caller's event loop with ``await engine.serve()``.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        scripts: Sequence[Script] | None = None,
        default: Reply | None = DEFAULT_REPLY,
        *,
        context_length: int = 32768,
        model_path: str = "strands-tito/local-engine",
        routed_experts: tuple[int, int, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        eos_token_ids: Sequence[int] | None = None,
        record_path: str | os.PathLike[str] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        openai_flavor: OpenAIFlavor = "vllm",
        reasoning_parser: str | None = None,
        image_understanding: bool = False,
        image_token: str = DEFAULT_IMAGE_TOKEN,
    ) -> None:
        self.image_understanding = image_understanding
        token_id = tokenizer.convert_tokens_to_ids(image_token)
        self.image_token_id: int | None = token_id if isinstance(token_id, int) else None
        if context_length < 8:
            raise ValueError(f"context_length must be at least 8, got {context_length}")
        if routed_experts is not None:
            num_layers, top_k, num_experts = routed_experts
            if num_layers < 1 or top_k < 1 or num_experts < top_k:
                raise ValueError(
                    f"routed_experts needs layers >= 1 and 1 <= top_k <= num_experts, got {routed_experts}"
                )
        self.tokenizer = tokenizer
        self.default = default
        self.context_length = context_length
        self.model_path = model_path
        self.routed_experts = routed_experts
        self.host = host
        self.port = port
        self.record_path = Path(record_path) if record_path is not None else None

        tokenizer_eos = tokenizer.eos_token_id
        if eos_token_ids is not None:
            self.eos_token_ids: tuple[int, ...] = tuple(eos_token_ids)
        elif isinstance(tokenizer_eos, int):
            self.eos_token_ids = (tokenizer_eos,)
        else:
            self.eos_token_ids = ()
        self.vocab_size = len(tokenizer)
        self._outputs = OutputBuilder(tokenizer, self.eos_token_ids, routed_experts)
        self._tracker = ConversationTracker(lambda ids: self._outputs.decode(ids, skip_special_tokens=False))
        # SGLang: max_req_len = context_len - 1 (ample KV cache assumed), max_req_input_len = max_req_len - 5.
        self.max_req_len = context_length - 1
        self.max_req_input_len = self.max_req_len - 5

        self._records_lock = threading.Lock()
        self._records: list[EngineRecord] = []
        self._flights: set[_Flight] = set()
        self._running_event: asyncio.Event | None = None
        self._server = HttpServer(self._dispatch, max_body=max_body, server_name="strands-tito-engine")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started_at = time.time()
        for script in scripts or ():
            self.add_script(script)
        from .openai_chat import ChatCompletions

        self.openai_flavor: OpenAIFlavor = openai_flavor
        self._chat = ChatCompletions(self, openai_flavor, reasoning_parser)
        from .vllm_api import VLLMEndpoints

        #: vLLM's token-id endpoints; ``engine.vllm.scale_out = False`` imitates a server without --enable-scale-out.
        self.vllm = VLLMEndpoints(self)

        self._routes: dict[str, dict[str, RouteHandler]] = {
            "/generate": {"POST": self._generate, "PUT": self._generate},
            "/health": {"GET": self._health},
            "/health_generate": {"GET": self._health},
            "/ready": {"GET": self._health},
            "/model_info": {"GET": self._model_info},
            "/get_model_info": {"GET": self._model_info},
            "/server_info": {"GET": self._server_info},
            "/get_server_info": {"GET": self._server_info},
            "/v1/models": {"GET": self._models},
            "/v1/chat/completions": {"POST": self._chat.handle},
            "/inference/v1/generate": {"POST": self.vllm.generate},
            "/v1/completions": {"POST": self.vllm.completions},
            "/flush_cache": {"GET": self._flush_cache, "POST": self._flush_cache},
            "/abort_request": {"POST": self._abort_request},
            "/pause_generation": {"POST": self._pause_generation},
            "/continue_generation": {"POST": self._continue_generation},
        }

    # -- construction helpers --------------------------------------------------------------------------------------

    @classmethod
    def from_script_file(
        cls, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike[str], **kwargs: Any
    ) -> LocalEngine:
        """Build an engine from a JSON script file (see :class:`~strands_tito.engine.script.ScriptFile`)."""
        script_file = ScriptFile.load(path)
        return cls(tokenizer, script_file.scripts, script_file.default, **kwargs)

    def add_script(self, script: Script) -> None:
        """Add a script for future conversations; safe to call from any thread while the engine runs."""
        self._tracker.add_script(script)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (the real port once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def records(self) -> list[EngineRecord]:
        """A snapshot of all records so far, oldest first."""
        with self._records_lock:
            return list(self._records)

    def generate_records(self) -> list[EngineRecord]:
        """The records of ``/generate`` requests only."""
        return [record for record in self.records if record.path == "/generate"]

    def chat_records(self) -> list[EngineRecord]:
        """The records of ``/v1/chat/completions`` requests only."""
        return [record for record in self.records if record.path == "/v1/chat/completions"]

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def _open(self) -> None:
        self._running_event = asyncio.Event()
        self._running_event.set()
        self.host, self.port = await self._server.start(self.host, self.port)
        self._started_at = time.time()

    async def _close(self) -> None:
        await self._server.close()

    async def serve(self, on_ready: Callable[[LocalEngine], None] | None = None) -> None:
        """Serve in the running event loop until cancelled; ``on_ready`` is called once listening."""
        await self._open()
        try:
            if on_ready is not None:
                on_ready(self)
            await asyncio.Event().wait()  # until cancelled
        finally:
            await self._close()

    def start(self) -> LocalEngine:
        """Run the server in a background thread with its own event loop; returns once it is listening."""
        if self._thread is not None:
            raise RuntimeError("engine already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._close())
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name="strands-tito-engine", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            self._thread.join()
            self._thread = None
            raise errors[0]
        return self

    def stop(self) -> None:
        """Stop a server started with :meth:`start` (drops open connections); idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        if not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None
        self._loop = None

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- records ---------------------------------------------------------------------------------------------------

    def _record(self, record: EngineRecord) -> None:
        with self._records_lock:
            self._records.append(record)
            if self.record_path is not None:
                try:
                    with self.record_path.open("a", encoding="utf-8") as handle:
                        handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
                except OSError:
                    logger.exception("could not append to record file %s", self.record_path)

    # -- dispatch --------------------------------------------------------------------------------------------------

    async def _dispatch(self, request: Request, conn: Connection) -> AnyResponse:
        received = time.time()
        methods = self._routes.get(request.path)
        method = request.method
        if methods is not None and method == "HEAD" and "GET" in methods:
            method = "GET"  # Starlette serves HEAD on every GET route; the HTTP layer drops the body
        if methods is None:
            response: AnyResponse = json_response({"detail": "Not Found"}, 404)
        elif method not in methods:
            allow = ", ".join(methods)
            response = json_response({"detail": "Method Not Allowed"}, 405, {"allow": allow})
        else:
            response = await methods[method](request, conn, received)
            if request.path in ("/generate", "/v1/chat/completions", "/inference/v1/generate", "/v1/completions"):
                return response  # these write their own, richer records
        if isinstance(response, Response):
            body = _parse_body(request.body)
            rid = body.get("rid") if isinstance(body, dict) and request.path == "/abort_request" else None
            self._record(
                EngineRecord(
                    rid=rid if isinstance(rid, str) else None,
                    path=request.path,
                    method=request.method,
                    request=body,
                    status=response.status,
                    response=_parse_response_body(response),
                    received_at=received,
                )
            )
        return response

    # -- simple endpoints ------------------------------------------------------------------------------------------

    async def _health(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        return empty_response(200)

    def _model_type(self) -> tuple[str, str]:
        if self.routed_experts is not None:
            return "qwen3_moe", "Qwen3MoeForCausalLM"
        return "qwen3", "Qwen3ForCausalLM"

    async def _model_info(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        model_type, architecture = self._model_type()
        return json_response(
            {
                "model_path": self.model_path,
                "served_model_name": self.model_path,
                "tokenizer_path": self.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": "null",
                "has_image_understanding": self.image_understanding,
                "has_audio_understanding": False,
                "model_type": model_type,
                "architectures": [architecture],
            }
        )

    async def _server_info(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        running = self._tracker.in_flight()
        return json_response(
            {
                "model_path": self.model_path,
                "tokenizer_path": self.model_path,
                "tokenizer_mode": "auto",
                "skip_tokenizer_init": False,
                "load_format": "auto",
                "context_length": self.context_length,
                "is_embedding": False,
                "host": self.host,
                "port": self.port,
                "served_model_name": self.model_path,
                "weight_version": "default",
                "enable_return_routed_experts": self.routed_experts is not None,
                "disable_radix_cache": False,
                "allow_auto_truncate": False,
                "incremental_streaming_output": False,
                "enable_lora": False,
                "dp_size": 1,
                "tp_size": 1,
                "launch_command": f"python -m strands_tito.engine --port {self.port}",
                "max_total_num_tokens": self.context_length * 16,
                "max_req_input_len": self.max_req_input_len,
                "kv_events": None,
                "startup_time": self._started_at,
                "internal_states": [
                    {"dp_rank": 0, "last_gen_throughput": 0.0, "num_running_reqs": running, "num_waiting_reqs": 0}
                ],
                "version": SGLANG_VERSION,
                "frontend": "python",
                "strands_tito_engine": True,
            }
        )

    async def _models(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        card = {
            "id": self.model_path,
            "object": "model",
            "created": int(self._started_at),
            "owned_by": "sglang",
            "root": self.model_path,
            "parent": None,
            "max_model_len": self.context_length,
        }
        return json_response({"object": "list", "data": [card]})

    async def _flush_cache(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        if self._flights:
            return text_response(FLUSH_BUSY, 400)
        self._tracker.flush_cache()
        return text_response(FLUSH_OK)

    def _abort_flights(self, rid: str | None, abort_all: bool) -> None:
        for flight in self._flights:
            if abort_all or flight.rid == rid:
                flight.aborted.set()

    async def _abort_request(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        body = _parse_body(request.body)
        rid = body.get("rid") if isinstance(body, dict) else None
        abort_all = bool(body.get("abort_all")) if isinstance(body, dict) else False
        self._abort_flights(rid if isinstance(rid, str) else None, abort_all)
        return empty_response(200)

    async def _pause_generation(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        body = _parse_body(request.body)
        mode = body.get("mode", "abort") if isinstance(body, dict) else "abort"
        if self._running_event is not None:
            self._running_event.clear()
        if mode == "abort":
            self._abort_flights(None, True)
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def _continue_generation(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        if self._running_event is not None:
            self._running_event.set()
        return json_response({"message": "Generation continued successfully.", "status": "ok"})

    # -- /generate -------------------------------------------------------------------------------------------------

    async def _generate(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        record = EngineRecord(
            rid=None,
            path=request.path,
            method=request.method,
            request=_parse_body(request.body),
            status=0,
            response=None,
            received_at=received,
        )
        try:
            generate = self._parse(request)
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
            self._record(record)
            return json_response(body, 500)

    def _parse(self, request: Request) -> GenerateRequest:
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

    def _reject(self, record: EngineRecord, exc: ProtocolError, stream: bool) -> AnyResponse:
        if stream and exc.stage == "value":
            events = [sse_error_event(exc.message)]
            record.status = 200
            record.response = [*events, "[DONE]"]
            self._record(record)
            return StreamResponse(_iterate([*(_sse(event) for event in events), _SSE_DONE]))
        record.status = exc.status
        record.response = exc.body
        self._record(record)
        return json_response(exc.body, exc.status)

    def _encode_prompt(self, generate: GenerateRequest) -> list[int]:
        if generate.input_ids is not None:
            return generate.input_ids
        return list(self.tokenizer.encode(generate.text or ""))

    def _validate(self, generate: GenerateRequest, prompt: list[int]) -> int:
        """Run SGLang's length/sampling/scheduler checks; return the effective max_new_tokens."""
        if not prompt:
            raise value_error("input_ids cannot be empty.")
        if any(token < 0 or token >= self.vocab_size for token in prompt):
            raise value_error(
                f"The input_ids {prompt} contains values greater than the vocab size ({self.vocab_size})."
            )
        prompt_tokens = len(prompt)
        if prompt_tokens >= self.context_length:
            raise value_error(input_too_long_message(prompt_tokens, self.context_length))
        requested = generate.sampling.max_new_tokens
        # SGLang's check is ">=" although its message says "exceeds".
        if requested is not None and requested + prompt_tokens >= self.context_length:
            raise value_error(requested_too_many_message(prompt_tokens, requested, self.context_length))
        verify_sampling_params(generate.sampling)
        if generate.logprob_start_len > prompt_tokens:
            raise value_error(logprob_start_len_message(generate.logprob_start_len, prompt_tokens))
        if prompt_tokens >= self.max_req_input_len:
            raise value_error(scheduler_input_length_message(prompt_tokens, self.max_req_input_len))
        if self.routed_experts is not None and generate.return_routed_experts:
            start = generate.routed_experts_start_len
            if not 0 <= start <= prompt_tokens:
                raise value_error(
                    f"routed_experts_start_len={start} is out of range: it must be in [0, {prompt_tokens}] "
                    f"(the number of input tokens)."
                )
        wanted = requested if requested is not None else DEFAULT_MAX_NEW_TOKENS
        return min(wanted, self.max_req_len - prompt_tokens - 1)

    # -- the request lifecycle -------------------------------------------------------------------------------------

    def _assign(
        self, prompt: list[int], cap: int, record: EngineRecord, *, rerendered: bool = False
    ) -> tuple[Conversation, Step | None]:
        """Attribute a request to its conversation, take the conversation's next step, and note both on the record."""
        assignment = self._tracker.assign(prompt, self.default, cap, rerendered=rerendered)
        record.conversation = assignment.conversation.index
        record.script = assignment.conversation.script
        record.unscripted = assignment.unscripted
        record.cached_tokens = assignment.cached_tokens
        if isinstance(assignment.step, Fault):
            record.fault = assignment.step.label
        return assignment.conversation, assignment.step

    def _disconnected(self, record: EngineRecord, conversation: Conversation | None, prompt: list[int]) -> RawResponse:
        """Record a request whose client went away before the reply (SGLang aborts those); nothing is sent."""
        record.status = DISCONNECTED_STATUS
        record.disconnected = True
        self._tracker.finish(conversation, prompt, prompt)
        self._record(record)
        return RawResponse(b"")

    async def _wait_for_step(self, step: Step | None, conn: Connection, flight: _Flight) -> Literal["done", "aborted"]:
        """Wait out a step's delay (a slow reply), noticing a client that leaves or an abort meanwhile."""
        delay = step.delay if step is not None else 0.0
        if delay > 0 or flight.aborted.is_set():
            return await self._wait(delay, conn, flight)
        return "done"

    async def _wait(self, delay: float, conn: Connection, flight: _Flight) -> Literal["done", "aborted"]:
        """Wait out ``delay`` (and any pause); raise _Disconnected if the client leaves, report an abort."""
        assert self._running_event is not None
        deadline = asyncio.get_running_loop().time() + delay
        while True:
            if conn.disconnected.is_set():
                raise _Disconnected
            if flight.aborted.is_set():
                return "aborted"
            remaining = deadline - asyncio.get_running_loop().time()
            if self._running_event.is_set() and remaining <= 0:
                return "done"
            waiters = [
                asyncio.ensure_future(conn.disconnected.wait()),
                asyncio.ensure_future(flight.aborted.wait()),
            ]
            if not self._running_event.is_set():
                waiters.append(asyncio.ensure_future(self._running_event.wait()))
            try:
                await asyncio.wait(
                    waiters,
                    timeout=remaining if self._running_event.is_set() else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()

    async def _run(
        self, generate: GenerateRequest, record: EngineRecord, conn: Connection, received: float
    ) -> AnyResponse:
        prompt = self._encode_prompt(generate)
        record.input_ids = list(prompt)
        max_new = self._validate(generate, prompt)
        if generate.image_data is not None:
            record.image_data = list(generate.image_data)
            refused = check_image_data(
                generate.image_data, prompt, supported=self.image_understanding, token_id=self.image_token_id
            )
            if refused is not None:
                raise refused

        flight = _Flight(generate.rid)
        self._flights.add(flight)
        conversation: Conversation | None = None
        try:
            # A paused server holds requests before they are scheduled.
            assert self._running_event is not None
            if not self._running_event.is_set() and await self._wait(0.0, conn, flight) == "aborted":
                outcome = Outcome([], finish_abort(), success=False)
                return self._respond(generate, record, prompt, outcome, 0, received, None)
            cap = len(prompt) - 1
            if generate.return_logprob and generate.logprob_start_len >= 0:
                cap = min(cap, generate.logprob_start_len)  # SGLang caps prefix reuse at logprob_start_len
            conversation, step = self._assign(prompt, cap, record)
            cached = record.cached_tokens or 0
            status = await self._wait_for_step(step, conn, flight)
            if status == "aborted":
                outcome = Outcome([], finish_abort(), success=False)
                return self._respond(generate, record, prompt, outcome, cached, received, conversation)
            return self._answer(generate, record, prompt, step, max_new, cached, received, conversation)
        except _Disconnected:
            return self._disconnected(record, conversation, prompt)
        finally:
            self._flights.discard(flight)
            if conversation is not None:
                self._tracker.release(conversation)

    def _answer(
        self,
        generate: GenerateRequest,
        record: EngineRecord,
        prompt: list[int],
        step: Step | None,
        max_new: int,
        cached: int,
        received: float,
        conversation: Conversation,
    ) -> AnyResponse:
        if step is None:
            raise value_error(NO_SCRIPT_MESSAGE)
        if isinstance(step, Reply):
            outcome = self._outputs.apply_stops(self._outputs.reply_ids(step), generate.sampling, max_new)
            if step.finish is not None:
                outcome.finish = dict(step.finish)
            return self._respond(generate, record, prompt, outcome, cached, received, conversation)
        self._tracker.finish(conversation, prompt, ())
        if step.kind == "http":
            status = step.status or 503
            body = http_fault_body(status, step.message)
            headers = {"retry-after": f"{step.retry_after:g}"} if step.retry_after is not None else {}
            record.status, record.response = status, body
            self._record(record)
            return json_response(body, status, headers)
        if step.kind == "context_overflow":
            raise value_error(self._overflow_message(step, generate, len(prompt)))
        if step.kind == "abort":
            message = step.message or "Aborted"
            if step.status is None:
                partial = self._outputs.reply_ids(step.reply) if step.reply is not None else []
                outcome = Outcome(partial[: max(max_new, 0)], finish_abort(message), success=False)
                return self._respond(generate, record, prompt, outcome, cached, received, conversation)
            if step.status == 400:
                raise value_error(message)
            body = object_error_body(message, step.status, str(step.status))
            record.status, record.response = step.status, body
            self._record(record)
            return json_response(body, step.status)
        reply = step.reply or DEFAULT_REPLY
        outcome = self._outputs.apply_stops(self._outputs.reply_ids(reply), generate.sampling, max_new)
        outcome.success = False
        return self._respond(generate, record, prompt, outcome, cached, received, conversation, malformed=step)

    def _overflow_message(self, fault: Fault, generate: GenerateRequest, prompt_tokens: int) -> str:
        if fault.variant == "total":
            requested = generate.sampling.max_new_tokens
            wanted = requested if requested is not None else DEFAULT_MAX_NEW_TOKENS
            return requested_too_many_message(prompt_tokens, wanted, self.context_length)
        if fault.variant == "scheduler":
            return scheduler_input_length_message(prompt_tokens, self.max_req_input_len)
        return input_too_long_message(prompt_tokens, self.context_length)

    def _respond(
        self,
        generate: GenerateRequest,
        record: EngineRecord,
        prompt: list[int],
        outcome: Outcome,
        cached: int,
        received: float,
        conversation: Conversation | None,
        malformed: Fault | None = None,
    ) -> AnyResponse:
        """Build, record and return a 200 answer (plain JSON or SSE), broken as ``malformed`` asks."""
        out = outcome.out
        base = len(prompt)
        record.output_ids = list(out)
        record.output_logprobs = [token_logprob(token, base + i) for i, token in enumerate(out)]
        sequence = [*prompt, *out]
        self._tracker.finish(conversation, sequence if outcome.success else prompt, sequence)

        bodies = self._outputs.bodies(generate, prompt, outcome, cached, received)
        kind = malformed.malformed_kind if malformed is not None else None
        allow_nan = kind == "nan_logprob"
        if kind is not None:
            for body in bodies:
                self._outputs.malform(kind, body, prompt)

        record.status = 200
        if not generate.stream:
            body = bodies[-1]
            if kind == "non_json":
                record.response = _NON_JSON_BODY
                self._record(record)
                return Response(200, _NON_JSON_BODY.encode(), "application/json")
            response = json_response(body, 200, allow_nan=allow_nan)
            if kind == "truncated_body":
                half = response.body[: len(response.body) // 2]
                record.response = half.decode("utf-8", errors="replace")
                self._record(record)
                head = (
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(response.body)}\r\nserver: strands-tito-engine\r\n\r\n"
                ).encode()
                return RawResponse(head + half)
            record.response = json.loads(response.body)
            self._record(record)
            return response

        if kind == "non_json":
            chunks = [f"data: {_NON_JSON_BODY}\n\n".encode() for _ in bodies] + [_SSE_DONE]
            record.response = [_NON_JSON_BODY for _ in bodies] + ["[DONE]"]
        else:
            chunks = [_sse(body, allow_nan=allow_nan) for body in bodies] + [_SSE_DONE]
            record.response = [*bodies, "[DONE]"]
        if kind == "truncated_body":
            data = b"".join(chunks)
            half = data[: len(data) // 2]
            record.response = half.decode("utf-8", errors="replace")
            self._record(record)
            head = (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\nserver: strands-tito-engine\r\n\r\n"
            )
            return RawResponse(head + b"%x\r\n%b\r\n" % (len(half), half))
        self._record(record)
        return StreamResponse(_iterate(chunks))
