"""SGLang's info, health and control endpoints on the local engine.

``/health``, ``/health_generate``, ``/model_info``, ``/server_info``, ``/v1/models`` report the served model as
SGLang 0.5.23 does; ``/flush_cache``, ``/abort_request``, ``/pause_generation`` and ``/continue_generation`` act on
the :class:`~strands_tito.testing.engine.core.EngineCore`'s requests in flight, prefix cache and paused switch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from strands_tito.testing.engine.core import EngineCore
from strands_tito.testing.engine.records import parse_body
from strands_tito.testing.http_server import (
    AnyResponse,
    Connection,
    Request,
    empty_response,
    json_response,
    text_response,
)

__all__ = ["FLUSH_BUSY", "FLUSH_OK", "SGLANG_VERSION", "AdminEndpoints"]

FLUSH_OK: Final[str] = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
FLUSH_BUSY: Final[str] = (
    "Cache not flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
SGLANG_VERSION: Final[str] = "0.5.23"


class AdminEndpoints:
    """The info and control handlers over one core; ``address`` gives the server's current ``(host, port)``."""

    def __init__(self, core: EngineCore, address: Callable[[], tuple[str, int]]) -> None:
        self.core = core
        self.address = address

    async def health(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        return empty_response(200)

    def model_type(self) -> tuple[str, str]:
        """``(model_type, architecture)``: Qwen3, or its MoE sibling when routed experts are emulated."""
        if self.core.routed_experts is not None:
            return "qwen3_moe", "Qwen3MoeForCausalLM"
        return "qwen3", "Qwen3ForCausalLM"

    async def model_info(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        model_type, architecture = self.model_type()
        core = self.core
        return json_response(
            {
                "model_path": core.model_path,
                "served_model_name": core.model_path,
                "tokenizer_path": core.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": core.weight_version,
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": "null",
                "has_image_understanding": core.image_understanding,
                "has_audio_understanding": False,
                "model_type": model_type,
                "architectures": [architecture],
            }
        )

    async def server_info(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        core = self.core
        spec = core.speculative
        host, port = self.address()
        running = core.conversations.in_flight()
        return json_response(
            {
                "model_path": core.model_path,
                "tokenizer_path": core.model_path,
                "tokenizer_mode": "auto",
                "skip_tokenizer_init": False,
                "load_format": "auto",
                "context_length": core.context_length,
                "is_embedding": False,
                "host": host,
                "port": port,
                "served_model_name": core.model_path,
                # /server_info shows the launch value (--weight-version); /model_info the current one.
                "weight_version": core.launch_weight_version,
                "enable_return_routed_experts": core.routed_experts is not None,
                # The resolved speculative settings a client computes the reserved context from (§7.5).
                "speculative_algorithm": spec.speculative_algorithm if spec is not None else None,
                "speculative_eagle_topk": spec.speculative_eagle_topk if spec is not None else None,
                "speculative_num_steps": spec.speculative_num_steps if spec is not None else None,
                "speculative_num_draft_tokens": spec.speculative_num_draft_tokens if spec is not None else None,
                "disable_radix_cache": False,
                "allow_auto_truncate": False,
                "incremental_streaming_output": False,
                "enable_lora": False,
                "dp_size": 1,
                "tp_size": 1,
                "launch_command": f"python -m strands_tito.testing.engine --port {port}",
                "max_total_num_tokens": core.context_length * 16,
                "max_req_input_len": core.max_req_input_len,
                "kv_events": None,
                "startup_time": core.started_at,
                "internal_states": [
                    {"dp_rank": 0, "last_gen_throughput": 0.0, "num_running_reqs": running, "num_waiting_reqs": 0}
                ],
                "version": SGLANG_VERSION,
                "frontend": "python",
                "strands_tito_engine": True,
            }
        )

    async def models(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        core = self.core
        card = {
            "id": core.model_path,
            "object": "model",
            "created": int(core.started_at),
            "owned_by": "sglang",
            "root": core.model_path,
            "parent": None,
            "max_model_len": core.context_length,
        }
        return json_response({"object": "list", "data": [card]})

    async def flush_cache(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        if self.core.busy:
            return text_response(FLUSH_BUSY, 400)
        self.core.conversations.flush_cache()
        return text_response(FLUSH_OK)

    async def abort_request(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        body = parse_body(request.body)
        rid = body.get("rid") if isinstance(body, dict) else None
        abort_all = bool(body.get("abort_all")) if isinstance(body, dict) else False
        self.core.abort(rid if isinstance(rid, str) else None, abort_all)
        return empty_response(200)

    async def pause_generation(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        body = parse_body(request.body)
        mode = body.get("mode", "abort") if isinstance(body, dict) else "abort"
        self.core.pause()
        if mode == "abort":
            self.core.abort(None, True)
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    async def update_weight_version(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        """``POST /update_weight_version`` (``http_server.py:1527-1556``): aborts all requests first unless
        ``abort_all_requests`` is false; requests that keep running finish with two ``weight_versions`` spans."""
        body = parse_body(request.body)
        version = body.get("new_version") if isinstance(body, dict) else None
        if not isinstance(version, str):
            return json_response(
                {"success": False, "message": "Failed to update weight version: new_version must be a string"}, 400
            )
        if body.get("abort_all_requests", True) is not False:
            self.core.abort(None, True)
        self.core.weight_version = version
        return json_response(
            {"success": True, "message": f"Weight version updated to {version}", "new_version": version}
        )

    async def continue_generation(self, request: Request, conn: Connection, received: float) -> AnyResponse:
        self.core.resume()
        return json_response({"message": "Generation continued successfully.", "status": "ok"})
