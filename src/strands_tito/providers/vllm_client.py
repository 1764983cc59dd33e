"""`VLLMClient`: the shared transport (:class:`~strands_tito.providers.client.TokenClient`) with vLLM's routes.

Two vLLM routes take token ids and give token ids back:

* ``POST /inference/v1/generate`` (vLLM's tokens-in/tokens-out endpoint): ``{"token_ids": [...],
  "sampling_params": {...}}`` in, ``choices[0].token_ids`` and ``choices[0].logprobs.content[i].{token_id, logprob}``
  out. The server registers it only with ``--enable-scale-out`` (or ``--tokens-only``); otherwise it answers 403.
* ``POST /v1/completions`` with a token-id ``prompt`` and ``return_token_ids: true``: ``choices[0].token_ids`` and
  ``choices[0].logprobs.token_logprobs``. Every vLLM OpenAI server has it.

:meth:`VLLMClient.generate_tokens` picks one: ``endpoint="auto"`` uses the first and falls back to the second, once
per client (the server lacks the route for good), if the server refuses it; ``"generate"`` fails with an error naming
``--enable-scale-out`` instead; ``"completions"`` never tries the first. Errors and logs name vLLM and its flags.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import orjson

from strands_tito.errors import ContextLengthError, ServerHTTPError
from strands_tito.providers.client import TokenClient, classify_http_error

__all__ = ["COMPLETIONS_PATH", "ENDPOINTS", "GENERATE_PATH", "Endpoint", "VLLMClient", "VLLMEndpointError"]

logger = logging.getLogger(__name__)

GENERATE_PATH = "/inference/v1/generate"
COMPLETIONS_PATH = "/v1/completions"
Endpoint = Literal["auto", "generate", "completions"]
#: The values ``VLLMConfig.endpoint`` takes.
ENDPOINTS: tuple[str, ...] = ("auto", "generate", "completions")


#: The start of Python's ``json`` error for a NaN, which vLLM 0.33 answers as a 400 on ``/v1/completions`` when a
#: sampled token's logprob is NaN (``completion/serving.py:765`` keeps it; ``error_response.py:80-83`` turns the
#: rendering's ``ValueError`` into a 400).
_NAN_NOT_JSON = "Out of range float values are not JSON compliant"


class VLLMEndpointError(ServerHTTPError):
    """The server refuses or lacks the endpoint the configuration needs; the message names the vLLM flag to add."""


def _endpoint_missing(error: ServerHTTPError) -> bool:
    """403 from a server without ``--enable-scale-out``; 404/405 (FastAPI's own body) from one without the route."""
    if error.status == 403:
        return True
    return error.status in (404, 405) and '"detail"' in error.body


class VLLMClient(TokenClient):
    """Async client for one vLLM server: :class:`TokenClient`'s pooling, retries, deadline and cancellation with
    vLLM's token-id routes, and vLLM's wording in errors and logs. Constructed as :class:`TokenClient`.

    Errors are the backend-neutral classes of :mod:`strands_tito.errors` (:class:`ContextLengthError` for prompts that
    do not fit, including vLLM's own messages; :class:`ThrottledError`; :class:`ServerHTTPError`): mapped like SGLang's.
    """

    backend_name: ClassVar[str] = "vLLM"
    # Learned once per server: it refused /inference/v1/generate, so "auto" goes to /v1/completions (set per instance).
    _without_generate: bool = False

    def http_error(self, method: str, path: str, status: int, body: str) -> ServerHTTPError:
        """The error for an HTTP error reply, naming vLLM, the route and the server flag that fixes it."""
        source = f"vLLM ({method} {path})"
        error = classify_http_error(status, body, source=source)
        if isinstance(error, ContextLengthError):
            return ContextLengthError(
                f"{source} returned HTTP 400, the prompt does not fit the context window (the server's "
                f"--max-model-len): {body[:500]}",
                status=status,
                body=body,
            )
        if status == 400 and path == COMPLETIONS_PATH and _NAN_NOT_JSON in body:
            message = (
                f"{error} (the sampled tokens had a NaN logprob, which vLLM cannot write as JSON on /v1/completions; "
                "the turn was not recorded)"
            )
            return type(error)(message, status=status, body=body)
        if status == 404 and '"model"' in body and "does not exist" in body:
            message = f"{error} (set model_id= to a name the server serves: vllm serve --served-model-name)"
            return type(error)(message, status=status, body=body)
        return error

    def path_for(self, endpoint: Endpoint) -> str:
        """The route a generation with this ``endpoint`` setting goes to next."""
        if endpoint == "completions" or (endpoint == "auto" and self._without_generate):
            return COMPLETIONS_PATH
        return GENERATE_PATH

    async def generate(
        self,
        token_ids: orjson.Fragment | Sequence[int],
        sampling_params: dict[str, Any],
        *,
        model: str | None = None,
        return_token_ids: bool = False,
        cancel_signal: threading.Event | None = None,
    ) -> dict[str, Any]:
        """``POST /inference/v1/generate``; returns the reply object (not yet validated).

        Args:
            token_ids: The whole prompt (an ``orjson.Fragment`` is sent as it is).
            sampling_params: vLLM ``SamplingParams`` keys.
            model: The served model name; None uses the server's default model.
            return_token_ids: Ask the server to echo the prompt ids.
            cancel_signal: See :meth:`TokenClient.post`.
        """
        payload: dict[str, Any] = {
            "request_id": uuid.uuid4().hex,
            "token_ids": token_ids,
            "sampling_params": sampling_params,
            "stream": False,
        }
        if model:
            payload["model"] = model
        if return_token_ids:
            payload["return_token_ids"] = True
        return await self.post(GENERATE_PATH, payload, cancel_signal)

    async def complete(
        self,
        prompt: orjson.Fragment | Sequence[int],
        sampling_params: dict[str, Any],
        *,
        model: str | None = None,
        cancel_signal: threading.Event | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/completions`` with a token-id prompt, asking for the generated ids (``return_token_ids``, and
        ``token_id:N`` logprob tokens for servers before it) and the weight versions; returns the reply object."""
        payload: dict[str, Any] = {
            **sampling_params,
            "prompt": prompt,
            "return_token_ids": True,
            # With logprobs, older servers without return_token_ids still identify each token ("token_id:N").
            "return_tokens_as_token_ids": True,
            # vLLM 0.33 (completion/protocol.py:182-189); older servers ignore it.
            "return_weight_versions": True,
            "stream": False,
        }
        payload.setdefault("logprobs", 0)
        if model:
            payload["model"] = model
        return await self.post(COMPLETIONS_PATH, payload, cancel_signal)

    async def generate_tokens(
        self,
        endpoint: Endpoint,
        token_ids: orjson.Fragment | Sequence[int],
        sampling_params: dict[str, Any],
        *,
        model: str | None = None,
        return_token_ids: bool = False,
        cancel_signal: threading.Event | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """One generation on the route ``endpoint`` selects (see the module docs); returns the route and its reply.

        Raises:
            VLLMEndpointError: ``endpoint="generate"`` and the server refuses ``/inference/v1/generate``.
        """
        if self.path_for(endpoint) == GENERATE_PATH:
            try:
                reply = await self.generate(
                    token_ids,
                    sampling_params,
                    model=model,
                    return_token_ids=return_token_ids,
                    cancel_signal=cancel_signal,
                )
                return GENERATE_PATH, reply
            except ServerHTTPError as e:
                if not _endpoint_missing(e):
                    raise
                if endpoint == "generate":
                    raise VLLMEndpointError(
                        f"vLLM refused {GENERATE_PATH} (HTTP {e.status}): start the server with --enable-scale-out "
                        f"(or --tokens-only), or use endpoint='completions' or 'auto'. Server said: {e.body[:300]}",
                        status=e.status,
                        body=e.body,
                    ) from e
                logger.warning(
                    "status=<%d> | vLLM has no %s (start it with --enable-scale-out); using %s with token-id prompts",
                    e.status,
                    GENERATE_PATH,
                    COMPLETIONS_PATH,
                )
                self._without_generate = True
        reply = await self.complete(token_ids, sampling_params, model=model, cancel_signal=cancel_signal)
        return COMPLETIONS_PATH, reply
