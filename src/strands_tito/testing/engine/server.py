"""``LocalEngine``: the local test/dev engine's server -- it wires the endpoint modules to one engine core.

It speaks SGLang's native HTTP protocol (``/generate`` plus the health/info/cache endpoints), an OpenAI-compatible
``/v1/chat/completions`` and vLLM's token-id endpoints; tracks conversations by token prefix like a radix cache, emits
deterministic logprobs and routed-expert ids, and can inject the faults a real deployment produces (HTTP errors,
context overflows, aborts, malformed bodies, slow replies). Every exchange is kept as an :class:`EngineRecord` so
tests can compare exactly which tokens went in and came out. The state lives in
:class:`~strands_tito.testing.engine.core.EngineCore`; this module only owns the socket, the thread and the routing
table.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from transformers import PreTrainedTokenizerBase

from strands_tito.testing.engine.admin import AdminEndpoints
from strands_tito.testing.engine.core import EngineCore, Speculative
from strands_tito.testing.engine.images import DEFAULT_IMAGE_TOKEN
from strands_tito.testing.engine.openai_chat import ChatCompletions, OpenAIFlavor
from strands_tito.testing.engine.records import EngineRecord, parse_body, parse_response_body
from strands_tito.testing.engine.script import DEFAULT_REPLY, Reply, Script, ScriptFile
from strands_tito.testing.engine.sglang_api import GenerateEndpoint
from strands_tito.testing.engine.vllm_api import VLLMEndpoints
from strands_tito.testing.http_server import (
    DEFAULT_MAX_BODY,
    AnyResponse,
    Connection,
    HttpServer,
    Request,
    Response,
    json_response,
)

__all__ = ["EngineRecord", "LocalEngine"]

RouteHandler = Callable[[Request, Connection, float], Awaitable[AnyResponse]]
#: Paths whose handlers write their own, richer records (the others are recorded by the dispatcher).
SELF_RECORDING: frozenset[str] = frozenset(
    {"/generate", "/v1/chat/completions", "/inference/v1/generate", "/v1/completions"}
)


class LocalEngine:
    """The local test/dev engine: an SGLang/vLLM/OpenAI-protocol server that replays scripted replies.

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
            of token ids and whether ``return_token_ids`` may stream (see
            :mod:`~strands_tito.testing.engine.openai_chat`).
        reasoning_parser: ``"qwen3"`` to split ``...</think>`` off chat replies as reasoning (None: keep it in
            the content, like a server started without ``--reasoning-parser``).
        image_understanding: report ``has_image_understanding: true`` on ``/model_info`` and accept ``image_data``
            (base64 image data URLs, one per ``image_token`` in ``input_ids``; placeholders are not expanded).
        image_token: the image placeholder token of the served template.
        weight_version: the weights' version replies report (``--weight-version``); ``POST
            /update_weight_version`` changes it.
        speculative: emulate a speculative-decoding server (EAGLE, EAGLE3, FROZEN_KV_MTP, NEXTN): the context it
            reserves per request counts in the length checks, and ``/server_info`` reports the settings.

    Run it in a background thread with :meth:`start` / :meth:`stop` (or ``with LocalEngine(...) as engine``), or
    inside the caller's event loop with ``await engine.serve()``. :attr:`core` holds the shared state (records,
    conversations, settings); :attr:`vllm` the vLLM endpoints' switches.
    """

    def __init__(  # noqa: PLR0913  one keyword per engine option
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
        weight_version: str = "default",
        speculative: Speculative | None = None,
    ) -> None:
        token_id = tokenizer.convert_tokens_to_ids(image_token)
        self.core = EngineCore(
            tokenizer,
            default,
            context_length=context_length,
            model_path=model_path,
            routed_experts=routed_experts,
            eos_token_ids=eos_token_ids,
            record_path=record_path,
            image_understanding=image_understanding,
            image_token_id=token_id if isinstance(token_id, int) else None,
            weight_version=weight_version,
            speculative=speculative,
        )
        self.host = host
        self.port = port
        self._server = HttpServer(self._dispatch, max_body=max_body, server_name="strands-tito-engine")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        for script in scripts or ():
            self.add_script(script)
        self.openai_flavor: OpenAIFlavor = openai_flavor
        self.chat = ChatCompletions(self.core, openai_flavor, reasoning_parser)
        #: vLLM's token-id endpoints; ``engine.vllm.scale_out = False`` imitates a server without --enable-scale-out.
        self.vllm = VLLMEndpoints(self.core)
        self.admin = AdminEndpoints(self.core, lambda: (self.host, self.port))
        self.sglang = GenerateEndpoint(self.core)
        self._routes = self._build_routes()

    def _build_routes(self) -> dict[str, dict[str, RouteHandler]]:
        admin, generate = self.admin, self.sglang.handle
        return {
            "/generate": {"POST": generate, "PUT": generate},
            "/health": {"GET": admin.health},
            "/health_generate": {"GET": admin.health},
            "/ready": {"GET": admin.health},
            "/model_info": {"GET": admin.model_info},
            "/get_model_info": {"GET": admin.model_info},
            "/server_info": {"GET": admin.server_info},
            "/get_server_info": {"GET": admin.server_info},
            "/v1/models": {"GET": admin.models},
            "/v1/chat/completions": {"POST": self.chat.handle},
            "/inference/v1/generate": {"POST": self.vllm.generate},
            "/v1/completions": {"POST": self.vllm.completions},
            "/flush_cache": {"GET": admin.flush_cache, "POST": admin.flush_cache},
            "/abort_request": {"POST": admin.abort_request},
            "/pause_generation": {"POST": admin.pause_generation},
            "/continue_generation": {"POST": admin.continue_generation},
            "/update_weight_version": {"POST": admin.update_weight_version},
        }

    # -- construction helpers --------------------------------------------------------------------------------------

    @classmethod
    def from_script_file(
        cls, tokenizer: PreTrainedTokenizerBase, path: str | os.PathLike[str], **kwargs: Any
    ) -> LocalEngine:
        """Build an engine from a JSON script file (see :class:`~strands_tito.testing.engine.script.ScriptFile`)."""
        script_file = ScriptFile.load(path)
        return cls(tokenizer, script_file.scripts, script_file.default, **kwargs)

    def add_script(self, script: Script) -> None:
        """Add a script for future conversations; safe to call from any thread while the engine runs."""
        self.core.add_script(script)

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` (the real port once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def records(self) -> list[EngineRecord]:
        """A snapshot of all records so far, oldest first."""
        return self.core.records

    def generate_records(self) -> list[EngineRecord]:
        """The records of ``/generate`` requests only."""
        return [record for record in self.records if record.path == "/generate"]

    def chat_records(self) -> list[EngineRecord]:
        """The records of ``/v1/chat/completions`` requests only."""
        return [record for record in self.records if record.path == "/v1/chat/completions"]

    # -- the core's settings, as attributes of the engine ----------------------------------------------------------

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.core.tokenizer

    @property
    def default(self) -> Reply | None:
        """The reply for requests with no scripted step left (settable)."""
        return self.core.default

    @default.setter
    def default(self, reply: Reply | None) -> None:
        self.core.default = reply

    @property
    def context_length(self) -> int:
        return self.core.context_length

    @property
    def model_path(self) -> str:
        return self.core.model_path

    @property
    def routed_experts(self) -> tuple[int, int, int] | None:
        return self.core.routed_experts

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.core.eos_token_ids

    @property
    def vocab_size(self) -> int:
        return self.core.vocab_size

    @property
    def max_req_len(self) -> int:
        return self.core.max_req_len

    @property
    def max_req_input_len(self) -> int:
        return self.core.max_req_input_len

    @property
    def record_path(self) -> Path | None:
        return self.core.record_path

    @property
    def image_understanding(self) -> bool:
        return self.core.image_understanding

    @property
    def image_token_id(self) -> int | None:
        return self.core.image_token_id

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def _open(self) -> None:
        self.host, self.port = await self._server.start(self.host, self.port)
        self.core.open()

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
            if request.path in SELF_RECORDING:
                return response
        if isinstance(response, Response):
            body = parse_body(request.body)
            rid = body.get("rid") if isinstance(body, dict) and request.path == "/abort_request" else None
            self.core.record(
                EngineRecord(
                    rid=rid if isinstance(rid, str) else None,
                    path=request.path,
                    method=request.method,
                    request=body,
                    status=response.status,
                    response=parse_response_body(response),
                    received_at=received,
                )
            )
        return response
