"""`SGLangClient`: the shared transport (:class:`~strands_tito.providers.client.TokenClient`) with SGLang's routes.

``POST /generate`` (token ids in, token ids and logprobs out), ``GET /model_info`` (modality), ``GET /server_info``
(``/get_server_info`` on older servers: the speculative-decoding reservation); ``/v1/models`` and ``/health`` come
from the transport, which serves them for both backends. Errors and logs name SGLang.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

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
from strands_tito.providers.client import TokenClient

__all__ = [
    "GENERATE_PATH",
    "RESERVING_ALGORITHMS",
    "SGLangCancelledError",
    "SGLangClient",
    "SGLangClientError",
    "SGLangConnectionError",
    "SGLangContextLengthError",
    "SGLangDecodingError",
    "SGLangHTTPError",
    "SGLangThrottledError",
    "speculative_reservation",
]

#: SGLang's native generation route.
GENERATE_PATH = "/generate"

# The SGLang names of the backend-neutral generation errors (one class, two names; see strands_tito.errors): an
# ``except SGLangHTTPError`` written for strands-sglang 0.6 catches vLLM's HTTP errors too.
SGLangClientError = GenerationError
SGLangHTTPError = ServerHTTPError
SGLangContextLengthError = ContextLengthError
SGLangThrottledError = ThrottledError
SGLangConnectionError = ServerConnectionError
SGLangDecodingError = ReplyDecodingError
SGLangCancelledError = RequestCancelledError


class SGLangClient(TokenClient):
    """Async client for one SGLang server (or its router): :class:`TokenClient`'s pooling, retries, deadline and
    cancellation with SGLang's routes; strands-sglang 0.6's client of the same name, its constructor arguments and
    ``generate(input_ids, **fields)`` included. Constructed as :class:`TokenClient`.
    """

    backend_name: ClassVar[str] = "SGLang"
    # What the server said once (cached on success only; set per instance).
    _is_multimodal: bool | None = None
    _reserved_tokens: int | None = None

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
        return await self.post(GENERATE_PATH, payload, cancel_signal)

    async def model_info(self) -> dict[str, Any]:
        """``GET /model_info`` (model path, modality flags, ...)."""
        info = await self.request_json("GET", "/model_info")
        if not isinstance(info, dict):
            raise ReplyDecodingError("SGLang (GET /model_info) did not return a JSON object")
        return info

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
