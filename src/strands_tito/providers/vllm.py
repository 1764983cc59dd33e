"""`VLLMModel`: a token-in/token-out Strands model provider over vLLM.

Token ids go in, the server's token ids and logprobs come back, and generated tokens are never re-tokenized. The two
vLLM routes that do that, and the choice between them (``endpoint="auto"``, the default, falls back from
``/inference/v1/generate`` to ``/v1/completions`` when the server lacks the first), are
:class:`~strands_tito.providers.vllm_client.VLLMClient`'s; this module validates their replies.

Everything else (per-agent trajectories, incremental prompts, strict tool parsing, context-window fitting, capture
on spans, error mapping) is shared with :class:`~strands_tito.providers.sglang.SGLangModel` through
:class:`~strands_tito.providers.token_model.TokenModel`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import orjson
from strands.models.model import BaseModelConfig
from transformers import PreTrainedTokenizerBase

from strands_tito import checks
from strands_tito.checks import WeightVersionSpan
from strands_tito.providers.generation import InvalidSampleError, weight_versions_of
from strands_tito.providers.reply_checks import finite_logprobs, keyed_logprobs
from strands_tito.providers.token_model import (
    Generation,
    GenerationRequest,
    HistoryConfig,
    ImagesNotSupportedError,
    TokenAbortedError,
    TokenModel,
    TokenResponseError,
    check_token_ids,
)
from strands_tito.providers.tool_parsers import ToolParser
from strands_tito.providers.vllm_client import (
    COMPLETIONS_PATH,
    ENDPOINTS,
    GENERATE_PATH,
    Endpoint,
    VLLMClient,
    VLLMEndpointError,
)
from strands_tito.replay import npy_rows
from strands_tito.trajectory import FinishReason

__all__ = [
    "COMPLETIONS_PATH",
    "GENERATE_PATH",
    "VLLMAbortedError",
    "VLLMClient",
    "VLLMConfig",
    "VLLMEndpointError",
    "VLLMInvalidSampleError",
    "VLLMModel",
    "VLLMResponseError",
]

_TOKEN_ID_PREFIX = "token_id:"
#: vLLM's finish for a request its repetition detection stopped (``sampling_params.repetition_detection``): the
#: tokens are real model output, so the turn is a ``stop`` (``matched_stop`` says why) and the agent sees ``end_turn``.
REPETITION = "repetition"


class VLLMResponseError(TokenResponseError):
    """A vLLM reply does not follow the protocol (missing token ids, wrong lengths, NaN logprobs, ...).

    Nothing from the reply is recorded.
    """

    backend_name = "vLLM"


class VLLMInvalidSampleError(VLLMResponseError, InvalidSampleError):
    """A generated token's logprob is vLLM's ``-9999.0`` floor (its value for a missing, NaN or infinite logprob),
    ``null``, or not a finite float32 number: the turn is refused, nothing is recorded (see
    :class:`~strands_tito.providers.generation.InvalidSampleError`)."""


class VLLMAbortedError(TokenAbortedError):
    """vLLM aborted the generation (``finish_reason`` ``"abort"`` or ``"error"``): an error, never a normal turn."""

    backend_name = "vLLM"


class VLLMConfig(BaseModelConfig, HistoryConfig, total=False):
    """Configuration of :class:`VLLMModel`.

    Attributes:
        model_id: The served model name (``vllm serve --served-model-name``), sent as ``model``; unset, the server's
            default model is used.
        sampling_params: vLLM ``SamplingParams`` keys (``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``,
            ``structured_outputs``, ...). ``max_tokens`` is fitted to the room left in the context window.
        return_logprob: Record output logprobs (default True).
        return_prompt_logprobs: Also record logprobs of new prompt tokens (``prompt_logprobs: 0``; off by default
            because vLLM computes them over the whole prompt and skips its prefix cache for such requests).
        return_prompt_token_ids: Ask ``/inference/v1/generate`` to echo the prompt ids and check them against what
            was sent (``/v1/completions`` always echoes them); costs O(context) bytes per turn.
        endpoint: ``"auto"`` (default), ``"generate"`` or ``"completions"``: which route the client uses (see
            :mod:`~strands_tito.providers.vllm_client`).
        return_routed_experts: Record MoE routing (R3) as vLLM returns it (``--enable-return-routed-experts``).
        enable_thinking: Passed to the chat template; None keeps the template's default.
        context_window_limit: Context length; when unset it is read from the server's ``/v1/models``.
    """

    model_id: str | None
    sampling_params: dict[str, Any]
    return_logprob: bool
    return_prompt_logprobs: bool
    return_prompt_token_ids: bool
    endpoint: Endpoint
    return_routed_experts: bool
    enable_thinking: bool | None


class VLLMModel(TokenModel):
    """Strands model provider that sends token IDs to vLLM and records the exact token trajectory.

    ``VLLMModel(tokenizer=..., base_url=..., model_id=..., tool_parser=..., sampling_params=...)``, or with
    ``client=`` a shared :class:`VLLMClient`. The same ``trajectory`` / ``trajectory_of`` / ``reset()`` surface,
    trajectory type and span schema as :class:`~strands_tito.providers.sglang.SGLangModel`.

    Args:
        tokenizer: The policy's Hugging Face tokenizer, with its chat template (the one vLLM serves).
        base_url: Server URL (``http://host:8000``), used to create a client when ``client`` is not given.
        model_id: The served model name (see :class:`VLLMConfig`).
        tool_parser: How tool calls are read from output text: a parser, a registry name, or ``"auto"`` (the
            default: chosen from the tokenizer's chat template, see ``strands_tito.providers.tool_parsers``).
        sampling_params: vLLM sampling parameters.
        client: A :class:`VLLMClient`; shared clients pool connections across models.
        **config: Other :class:`VLLMConfig` keys.

    Images are not supported: a prompt with an image raises :class:`ImagesNotSupportedError` before any request.
    """

    max_tokens_key = "max_tokens"
    # vLLM accepts prompt + max_tokens == max_model_len (SGLang needs one position free).
    reserved_positions = 0
    default_sampling_params: ClassVar[dict[str, Any]] = {}
    response_error = VLLMResponseError
    aborted_error = VLLMAbortedError
    config_type = VLLMConfig
    client_type = VLLMClient

    client: VLLMClient
    config: VLLMConfig

    def __init__(
        self,
        *,
        tokenizer: PreTrainedTokenizerBase,
        base_url: str | None = None,
        model_id: str | None = None,
        tool_parser: ToolParser | str | None = None,
        sampling_params: dict[str, Any] | None = None,
        client: VLLMClient | None = None,
        **config: Any,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("VLLMModel needs base_url= or client=")
            client = VLLMClient(base_url)
        if model_id is not None:
            config["model_id"] = model_id
        if sampling_params is not None:
            config["sampling_params"] = sampling_params
        super().__init__(
            tokenizer=tokenizer,
            client=client,
            tool_parser=tool_parser,
            defaults={
                "return_logprob": True,
                "return_prompt_logprobs": False,
                "return_prompt_token_ids": False,
                "endpoint": "auto",
            },
            config=config,
        )
        self._stop_ids = _eos_ids(tokenizer)

    def update_config(self, **model_config: Any) -> None:
        """Update configuration keys (see :class:`VLLMConfig`)."""
        if model_config.get("endpoint", "auto") not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {model_config['endpoint']!r}")
        super().update_config(**model_config)

    def get_config(self) -> VLLMConfig:
        """Return the configuration."""
        return self.config

    @property
    def endpoint_in_use(self) -> str:
        """The path the next request goes to (``/inference/v1/generate`` or ``/v1/completions``)."""
        return self.client.path_for(self.config.get("endpoint", "auto"))

    # -- one request -----------------------------------------------------------------------------------------------

    async def _generate(self, request: GenerationRequest) -> Generation:
        sampling = dict(request.sampling_params)
        if request.return_logprob:
            sampling["logprobs"] = 0  # the sampled token only
        if request.record and self.config.get("return_prompt_logprobs", False):
            sampling["prompt_logprobs"] = 0
        start = time.perf_counter()
        source, raw = await self.client.generate_tokens(
            self.config.get("endpoint", "auto"),
            _ids_json(request),
            sampling,
            model=self.config.get("model_id") or None,
            return_token_ids=bool(self.config.get("return_prompt_token_ids", False)),
            cancel_signal=request.cancel_signal,
        )
        latency = time.perf_counter() - start
        parse = _parse_generate if source == GENERATE_PATH else _parse_completion
        return self._finish(raw, request, parse(raw, request.return_logprob), latency, source)

    def _finish(
        self,
        raw: dict[str, Any],
        request: GenerationRequest,
        reply: _Parsed,
        latency: float,
        source: str,
    ) -> Generation:
        """The checks both endpoints share, then the text and the :class:`Generation`."""
        input_ids = request.input_ids
        choice, finish, stop_reason, output_ids = reply.choice, reply.finish, reply.stop_reason, reply.output_ids
        usage = raw.get("usage")
        if finish != "abort":
            if not output_ids:
                raise VLLMResponseError(f"{source} reply finished without generating any token")
            prompt_tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            if prompt_tokens is not None and prompt_tokens != len(input_ids):
                raise VLLMResponseError(f"server counted {prompt_tokens!r} prompt tokens, {len(input_ids)} were sent")
            if reply.prompt_ids is not None and reply.prompt_ids != input_ids:
                raise VLLMResponseError(f"{source} reply: the server's prompt_token_ids differ from the ids sent")
        prompt_logprobs = None
        if request.record and self.config.get("return_prompt_logprobs", False) and finish != "abort":
            prompt_logprobs = parse_prompt_logprobs(reply.prompt_logprob_entries, input_ids, request.new_prompt, source)
        cached = None  # vLLM reports it only with --enable-prompt-tokens-details
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            cached = details["cached_tokens"]
        matched: int | str | None = stop_reason
        if finish == "stop" and matched is None and output_ids:
            matched = output_ids[-1]
        request_id = raw.get("request_id") or raw.get("id")
        runs: tuple[WeightVersionSpan, ...] = ()
        version = None
        if finish != "abort":  # vllm/outputs.py:49-56: output tokens [start, end) sampled under version
            where = f"{source} reply's weight_versions"
            runs, version = weight_versions_of(
                choice.get("weight_versions"), None, len(output_ids), where, VLLMResponseError
            )
        want = request.record and self.config.get("return_routed_experts", False) and finish != "abort"
        routes, layout = npy_rows(choice, want, len(input_ids) + len(output_ids), request.recorded, VLLMResponseError)
        return Generation(
            output_ids=output_ids,
            output_logprobs=reply.output_logprobs,
            prompt_logprobs=prompt_logprobs,
            # A repetition stop matched no stop token or string: nothing to trim.
            text=self._text(output_ids, finish, None if choice.get("finish_reason") == REPETITION else stop_reason),
            finish_reason=finish,
            matched_stop=matched,
            cached_tokens=cached,
            completion_tokens=len(output_ids),
            latency_s=latency,
            request_id=request_id if isinstance(request_id, str) else None,
            weight_version=version,
            weight_versions=runs,
            routed_experts=routes,
            routed_experts_layout=layout,
            source=source,
            aborted=f"finish_reason={choice.get('finish_reason')!r}" if finish == "abort" else None,
        )

    def _text(self, output_ids: list[int], finish: FinishReason, stop_reason: int | str | None) -> str:
        """The output as text, decoded here from the ids (never the server's detokenization), with the matched stop
        token or stop string trimmed as SGLang does."""
        ids = output_ids
        if finish == "stop" and ids:
            last = ids[-1]
            if (stop_reason is None and last in self._stop_ids) or (
                isinstance(stop_reason, int) and last == stop_reason
            ):
                ids = ids[:-1]
        text = str(self.tokenizer.decode(ids, skip_special_tokens=False))
        if finish == "stop" and isinstance(stop_reason, str) and stop_reason:
            position = text.find(stop_reason)
            if position != -1:
                text = text[:position]
        return text

    def _structured_output_params(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"structured_outputs": {"json": schema}}

    async def _check_images_supported(self) -> None:
        raise ImagesNotSupportedError(
            "VLLMModel does not send images: vLLM's token-id endpoints (/inference/v1/generate, /v1/completions with "
            "a token-id prompt) take no image data from strands-tito yet; use SGLangModel for vision-language agents"
        )


# -- reply parsing --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parsed:
    """What one endpoint's reply says, in the shape both share."""

    choice: dict[str, Any]
    finish: FinishReason
    stop_reason: int | str | None
    output_ids: list[int]
    output_logprobs: list[float | None] | None
    prompt_ids: Any
    prompt_logprob_entries: Any


def _parse_generate(raw: dict[str, Any], want_logprobs: bool) -> _Parsed:
    """A ``/inference/v1/generate`` reply (prompt ids and prompt logprobs at the top level)."""
    choice, finish, stop_reason, output_ids = _choice(raw, GENERATE_PATH)
    output_logprobs = None
    if want_logprobs and finish != "abort":
        output_logprobs = _generate_logprobs(choice.get("logprobs"), output_ids)
    prompt = raw.get("prompt_token_ids"), raw.get("prompt_logprobs")
    return _Parsed(choice, finish, stop_reason, output_ids, output_logprobs, *prompt)


def _parse_completion(raw: dict[str, Any], want_logprobs: bool) -> _Parsed:
    """A ``/v1/completions`` reply (the ids in ``token_ids``, or as ``token_id:N`` logprob tokens on older servers)."""
    choice, finish, stop_reason, output_ids = _choice(raw, COMPLETIONS_PATH, allow_missing_ids=True)
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if output_ids is None:
        output_ids = _ids_from_logprob_tokens(logprobs)
    elif (
        isinstance(tokens, list)
        and all(isinstance(t, str) and t.startswith(_TOKEN_ID_PREFIX) for t in tokens)
        and _ids_from_logprob_tokens(logprobs) != output_ids
    ):
        raise VLLMResponseError(f"{COMPLETIONS_PATH} reply: token_ids and logprobs.tokens disagree")
    output_logprobs = None
    if want_logprobs and finish != "abort":
        output_logprobs = parse_completion_logprobs(logprobs, output_ids)
    prompt = choice.get("prompt_token_ids"), choice.get("prompt_logprobs")
    return _Parsed(choice, finish, stop_reason, output_ids, output_logprobs, *prompt)


def _eos_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Ids an EOS stop (``stop_reason`` None) can end on: the tokenizer's EOS and its other special tokens (vLLM also
    stops on the ``eos_token_id`` list of the model's generation config, which the client does not see)."""
    ids: set[int] = {i for i in tokenizer.all_special_ids if isinstance(i, int)}
    eos = tokenizer.eos_token_id
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, list):
        ids.update(i for i in eos if isinstance(i, int))
    return frozenset(ids)


def _choice(
    raw: dict[str, Any], source: str, *, allow_missing_ids: bool = False
) -> tuple[dict[str, Any], FinishReason, int | str | None, Any]:
    choices = raw.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise VLLMResponseError(f"{source} reply has no single choice (n > 1 is not supported)")
    choice = choices[0]
    reason = choice.get("finish_reason")
    if reason in ("abort", "error"):
        finish: FinishReason = "abort"
    elif reason in ("stop", "length"):
        finish = cast(FinishReason, reason)
    elif reason == REPETITION:
        finish = "stop"
    else:
        raise VLLMResponseError(f"{source} reply has an unknown finish_reason {reason!r}")
    stop_reason = choice.get("stop_reason")
    if stop_reason is not None and (not isinstance(stop_reason, int | str) or isinstance(stop_reason, bool)):
        raise VLLMResponseError(f"{source} reply has a stop_reason {stop_reason!r} that is not a token id or string")
    ids = choice.get("token_ids")
    if ids is None and finish == "abort":
        ids = []
    if ids is None and allow_missing_ids:
        return choice, finish, stop_reason, None
    if ids is None:
        raise VLLMResponseError(f"{source} reply has no token_ids")
    return choice, finish, stop_reason, check_token_ids(ids, f"{source} reply's token_ids", VLLMResponseError)


def _generate_logprobs(logprobs: Any, output_ids: Sequence[int]) -> list[float | None]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    where = f"{GENERATE_PATH} logprobs.content"
    values = keyed_logprobs(
        content, output_ids, where, VLLMResponseError, missing="never", value_error=VLLMInvalidSampleError
    )
    return checks.refuse_logprob_floor(values, where, VLLMInvalidSampleError)


def _ids_from_logprob_tokens(logprobs: Any) -> list[int]:
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    ids: list[int] = []
    if isinstance(tokens, list):
        for token in tokens:
            if not isinstance(token, str) or not token.startswith(_TOKEN_ID_PREFIX):
                break
            try:
                ids.append(int(token[len(_TOKEN_ID_PREFIX) :]))
            except ValueError:
                break
        else:
            return ids
    raise VLLMResponseError(
        f"{COMPLETIONS_PATH} reply has no token ids (choices[0].token_ids): this vLLM predates return_token_ids "
        "(v0.10.2). Upgrade it, start it with --enable-scale-out to use /inference/v1/generate, or start it with "
        "--return-tokens-as-token-ids and keep return_logprob on"
    )


def parse_completion_logprobs(logprobs: Any, output_ids: Sequence[int]) -> list[float | None]:
    """The output tokens' logprobs from a ``/v1/completions`` reply's ``logprobs`` object, one per id in
    ``output_ids``: a missing or malformed list is a :class:`VLLMResponseError`; a non-finite value, or vLLM's
    floor (:data:`strands_tito.checks.LOGPROB_FLOOR`, what it writes for a missing one), a
    :class:`VLLMInvalidSampleError`."""
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    where = f"{COMPLETIONS_PATH} logprobs.token_logprobs"
    if not isinstance(values, list) or len(values) != len(output_ids):
        got = len(values) if isinstance(values, list) else type(values).__name__
        raise VLLMResponseError(f"{where}: expected {len(output_ids)} entries, got {got}")
    checked = finite_logprobs(values, where, VLLMInvalidSampleError, missing="never")
    return checks.refuse_logprob_floor(checked, where, VLLMInvalidSampleError)


def _ids_json(request: GenerationRequest) -> orjson.Fragment | list[int]:
    """The prompt's ids for a request body: the JSON the trajectory keeps (no copy of the context), or a list."""
    return orjson.Fragment(request.input_ids_json) if request.input_ids_json is not None else list(request.input_ids)


def parse_prompt_logprobs(entries: Any, input_ids: Sequence[int], new_prompt: int, source: str) -> list[float | None]:
    """The logprobs of the last ``new_prompt`` prompt tokens from vLLM's ``prompt_logprobs`` (first entry null),
    checked against ``input_ids``; ``source`` names the endpoint in errors. A missing or mis-sized list, or an entry
    without the prompt token's own logprob, is a :class:`VLLMResponseError`; vLLM's floor at a prompt token reads as
    missing (None)."""
    where = f"{source} prompt_logprobs"
    if not isinstance(entries, list) or len(entries) != len(input_ids):
        got = len(entries) if isinstance(entries, list) else type(entries).__name__
        raise VLLMResponseError(
            f"{where}: expected {len(input_ids)} entries, got {got} (does the server allow prompt logprobs?)"
        )
    start = len(input_ids) - new_prompt
    values = _prompt_logprobs_at_once(entries[start:], input_ids[start:])
    if values is not None:
        return finite_logprobs(values, where, VLLMInvalidSampleError, missing="anywhere")
    out: list[Any] = []
    for position in range(start, len(input_ids)):
        entry = entries[position]
        if entry is None:
            out.append(None)
            continue
        found = entry.get(str(input_ids[position])) if isinstance(entry, dict) else None
        if not isinstance(found, dict):
            raise VLLMResponseError(f"{where}[{position}]: no entry for token {input_ids[position]}")
        out.append(found.get("logprob"))
    return finite_logprobs(checks.logprob_floor_as_missing(out), where, VLLMInvalidSampleError, missing="anywhere")


def _prompt_logprobs_at_once(entries: list[Any], ids: Sequence[int]) -> list[Any] | None:
    """The new prompt tokens' logprob values (unchecked, the floor read as missing) taken out in whole-array passes,
    or None when an entry is off (the caller's per-position loop then names it). Null entries are taken only at the
    start (position 0 is null)."""
    nulls = entries.count(None)
    if nulls and entries[:nulls].count(None) != nulls:
        return None
    rest: list[dict[str, Any]] = entries[nulls:]
    if rest and set(map(type, rest)) != {dict}:
        return None
    found: list[Any] = list(map(dict.get, rest, map(str, ids[nulls:])))
    if found and set(map(type, found)) != {dict}:
        return None
    head: list[Any] = [None] * nulls
    return head + checks.logprob_floor_as_missing(list(map(dict.get, found, itertools.repeat("logprob"))))
