"""`SGLangModel`: a token-in/token-out Strands model provider over SGLang's native ``/generate``.

The provider-independent machinery (per-agent trajectories, prompts, tool parsing, limits, capture, error mapping)
is :class:`~strands_tito.providers.token_model.TokenModel`; this module only sends ``/generate`` and validates its
reply.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
from strands.models.model import BaseModelConfig
from transformers import PreTrainedTokenizerBase

from strands_tito import checks
from strands_tito.checks import Missing, WeightVersionSpan
from strands_tito.errors import GenerationError
from strands_tito.providers.generation import InvalidSampleError, weight_versions_of
from strands_tito.providers.moe_layout import RoutedExpertsLayoutError, find_layout
from strands_tito.providers.reply_checks import triple_logprobs
from strands_tito.providers.sglang_client import SGLangClient
from strands_tito.providers.token_model import (
    STATE_KEY,
    Generation,
    GenerationRequest,
    HistoryConfig,
    HistoryRewrittenError,
    ImagesNotSupportedError,
    TokenAbortedError,
    TokenModel,
    TokenResponseError,
)
from strands_tito.providers.tool_parsers import ToolParser
from strands_tito.trajectory import FinishReason

__all__ = [
    "STATE_KEY",
    "HistoryRewrittenError",
    "ImagesNotSupportedError",
    "RoutedExpertsLayoutError",
    "SGLangAbortedError",
    "SGLangConfig",
    "SGLangInvalidSampleError",
    "SGLangModel",
    "SGLangResponseError",
]


logger = logging.getLogger(__name__)


class SGLangResponseError(TokenResponseError):
    """A ``/generate`` reply does not follow the protocol (missing fields, wrong lengths, NaN, ...).

    Nothing from the reply is recorded.
    """

    backend_name = "SGLang"


class SGLangInvalidSampleError(SGLangResponseError, InvalidSampleError):
    """A ``null`` logprob (SGLang's JSON for NaN or infinity) where the turn needs one, or SGLang's ``"NaN happened"``
    stop: the turn is refused, nothing is recorded (see :class:`~strands_tito.providers.generation.InvalidSampleError`).
    """


#: SGLang's stop for a sampled id outside the vocabulary (``schedule_batch.py`` ``_check_vocab_boundary_finish``).
NAN_STOP = "NaN happened"


class SGLangAbortedError(TokenAbortedError):
    """The server aborted the generation (``finish_reason.type == "abort"``): an error, never a normal turn."""

    backend_name = "SGLang"


class SGLangModel(TokenModel):
    """Strands model provider that sends token IDs to SGLang and records the exact token trajectory.

    Construct with a client (``SGLangModel(client=..., tokenizer=..., tool_parser=...)``) or a URL
    (``SGLangModel(tokenizer=..., base_url=...)``). Each agent using the model gets its own trajectory (kept in the
    per-agent model state Strands passes to :meth:`stream`); ``model.trajectory`` is the trajectory of the agent
    that called the model last, which is the agent's when only one uses it.

    Args:
        tokenizer: The policy's Hugging Face tokenizer, with its chat template.
        client: An :class:`SGLangClient`; shared clients pool connections across models.
        base_url: Server URL, used to create a client when ``client`` is not given.
        tool_parser: How tool calls are read from output text: a parser, a registry name, or ``"auto"`` (the
            default: chosen from the tokenizer's chat template, see ``strands_tito.providers.tool_parsers``).
        **config: :class:`SGLangConfig` keys.
    """

    class SGLangConfig(BaseModelConfig, HistoryConfig, total=False):
        """Configuration of :class:`SGLangModel`.

        Attributes:
            model_id: Name reported to Strands (and on its spans).
            sampling_params: SGLang sampling parameters; ``skip_special_tokens`` defaults to False so tool markup that
                uses special tokens survives in the text.
            return_logprob: Record logprobs (default True).
            return_routed_experts: Record MoE routing per turn (R3; needs ``--enable-return-routed-experts``). The
                routing layout is then found in the served model's ``config.json``: the tokenizer's folder (or its
                Hub id in the local Hugging Face cache), else the model path the server reports; found nowhere, the
                model refuses to be built and says to pass ``routed_experts_layout``.
            routed_experts_layout: ``(num_hidden_layers, num_experts_per_tok, num_experts)`` of the served MoE model
                (found as above when not given): routing travels compact (uint8/uint16) and records and Agent
                Lightning events carry it as a ``.npy`` of that shape.
            return_top_p: Record, per generated token, the token ids the top-p sampler kept (slime's top-p replay;
                sends ``custom_params.return_top_p_token_ids``, which needs slime's SGLang top-p patch).
            enable_thinking: Passed to the chat template; None keeps the template's default.
            first_prompt_logprobs: Record the first prompt's input logprobs too (default False). The first turn is then
                sent with ``logprob_start_len=0``, as strands-sglang 0.6 does, which stops SGLang from reusing a cached
                prefix for it (a system prompt shared across rollouts is computed again each time); the first token's
                logprob is None (SGLang has none for it). Off, the first prompt's logprobs are None and later turns'
                prompts are recorded either way.
            context_window_limit: Context length; when unset it is read from the server's ``/v1/models``.
        """

        model_id: str
        sampling_params: dict[str, Any]
        return_logprob: bool
        return_routed_experts: bool
        routed_experts_layout: tuple[int, int, int]
        return_top_p: bool
        enable_thinking: bool | None
        first_prompt_logprobs: bool

    max_tokens_key = "max_new_tokens"
    default_sampling_params: ClassVar[dict[str, Any]] = {"skip_special_tokens": False}
    response_error = SGLangResponseError
    aborted_error = SGLangAbortedError
    config_type = SGLangConfig
    client_type = SGLangClient
    client: SGLangClient
    config: SGLangConfig

    def __init__(
        self,
        *,
        tokenizer: PreTrainedTokenizerBase,
        client: SGLangClient | None = None,
        base_url: str | None = None,
        tool_parser: ToolParser | str | None = None,
        **config: Any,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("SGLangModel needs client= or base_url=")
            client = SGLangClient(base_url)
        super().__init__(
            tokenizer=tokenizer,
            client=client,
            tool_parser=tool_parser,
            defaults={"model_id": "sglang", "return_logprob": True, "return_routed_experts": False},
            config=config,
        )

    def update_config(self, **model_config: Any) -> None:
        """Update configuration keys (see :class:`SGLangConfig`).

        Raises:
            RoutedExpertsLayoutError: ``return_routed_experts`` is on and the routing layout is neither given nor
                found (see :class:`SGLangConfig`); the configuration is left as it was.
        """
        wants_routing = model_config.get("return_routed_experts", self.config.get("return_routed_experts", False))
        layout = model_config.get("routed_experts_layout", self.config.get("routed_experts_layout"))
        if wants_routing and layout is None:
            # Without the layout the routing could not be shaped for a trainer and would be left off every record.
            model_config["routed_experts_layout"] = find_layout(self.tokenizer, getattr(self.client, "base_url", None))
        super().update_config(**model_config)

    def get_config(self) -> SGLangConfig:
        """Return the configuration."""
        return self.config

    async def _context_limit(self) -> int | None:
        # A speculative server (EAGLE, EAGLE3, MTP) reserves context for draft tokens that /v1/models does not
        # subtract; fitting max_new_tokens to the full window would get every request refused.
        limit = await super()._context_limit()
        if limit is None:
            return None
        try:
            return limit - await self.client.reserved_tokens()
        except GenerationError as e:
            logger.warning("error=<%s> | could not read /server_info; will ask again next turn", e)
            return limit

    async def _check_images_supported(self) -> None:
        # /model_info is asked once (cached on success), before the first request that carries images.
        if not await self.client.is_multimodal():
            raise ImagesNotSupportedError(
                "the prompt has images but the served model does not understand images (SGLang's /model_info reports "
                "has_image_understanding false); serve a vision-language model"
            )

    async def _generate(self, request: GenerationRequest) -> Generation:
        input_ids = request.input_ids
        return_logprob = request.return_logprob
        return_routed = request.record and bool(self.config.get("return_routed_experts", False))
        images = request.image_data or None
        if images and return_routed:
            raise ImagesNotSupportedError(
                "return_routed_experts with images is not supported: SGLang's routing covers the expanded image tokens"
            )
        # Input logprobs start one token before the new prompt: SGLang reports null for the first position, and
        # prefix-cache reuse is capped at this value, so it must not be 0 on later turns. The first turn asks for
        # none (-1), which keeps the shared system prompt cacheable across rollouts, unless first_prompt_logprobs
        # asks for them all (0). With images SGLang counts positions after expanding each placeholder, which the
        # client cannot know: no input logprobs (-1 also leaves the whole prompt cacheable).
        if images:
            logprob_start = -1
        elif request.recorded:
            logprob_start = request.recorded - 1
        else:
            logprob_start = 0 if self.config.get("first_prompt_logprobs", False) else -1
        want_top_p = request.record and bool(self.config.get("return_top_p", False))
        sampling_params = request.sampling_params
        if want_top_p:
            custom = dict(sampling_params.get("custom_params") or {})
            sampling_params = {**sampling_params, "custom_params": {**custom, "return_top_p_token_ids": True}}
        if not request.record:
            raw = await self.client.generate(input_ids, sampling_params=request.sampling_params, image_data=images)
        else:
            raw = await self.client.generate(
                input_ids,
                input_ids_json=request.input_ids_json,
                sampling_params=sampling_params,
                return_logprob=return_logprob,
                logprob_start_len=logprob_start,
                return_routed_experts=return_routed,
                routed_experts_start_len=max(0, request.recorded - 1),
                rid=uuid.uuid4().hex,
                cancel_signal=request.cancel_signal,
                image_data=images,
            )
        reply = parse_reply(
            raw,
            input_ids,
            request.new_prompt,
            logprob_start,
            want_logprobs=return_logprob,
            want_routed=return_routed,
            expanded=bool(images),
        )
        layout = self.config.get("routed_experts_layout")
        if reply.routed_experts is not None and layout is not None:
            reply = dataclasses.replace(reply, routed_experts_layout=cast(tuple[int, int, int], tuple(layout)))
        if want_top_p and reply.finish_reason != "abort":
            reply = dataclasses.replace(reply, top_p=_top_p_sets(raw["meta_info"], len(reply.output_ids)))
        return reply

    def _structured_output_params(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {"json_schema": json.dumps(schema)}


#: The configuration type (also ``SGLangModel.SGLangConfig``, where strands-sglang 0.6 had it).
SGLangConfig = SGLangModel.SGLangConfig


#: Where slime's SGLang patch puts the top-p sets, and the older names slime also reads (slime/utils/types.py).
_TOP_P_IDS = ("top_p_token_ids", "top_p_kept_token_ids")
_TOP_P_OFFSETS = ("top_p_token_offsets", "top_p_kept_token_offsets")


def _int32_values(value: Any, where: str) -> list[int]:
    """Base64 of raw little-endian int32 (the patch's encoding, as SGLang's routing), or a plain list of ints."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raise SGLangResponseError(f"meta_info.{where} is not valid base64") from None
        if len(raw) % 4:
            raise SGLangResponseError(f"meta_info.{where} is not whole int32 values")
        values: list[int] = np.frombuffer(raw, dtype="<i4").tolist()
        return values
    if checks.is_token_id_list(value):
        return value
    raise SGLangResponseError(f"meta_info.{where} is neither base64 int32 nor a list of ints")


def _top_p_sets(meta: dict[str, Any], outputs: int) -> tuple[list[int], list[int]]:
    """The top-p token sets of a reply: ``(token_ids, offsets)`` with ``outputs + 1`` row ends from 0."""
    ids_key = next((k for k in _TOP_P_IDS if k in meta), None)
    offsets_key = next((k for k in _TOP_P_OFFSETS if k in meta), None)
    if ids_key is None or offsets_key is None:
        raise SGLangResponseError(
            "top-p token sets were requested but the reply has none (the server needs slime's SGLang top-p patch)"
        )
    ids, offsets = _int32_values(meta[ids_key], ids_key), _int32_values(meta[offsets_key], offsets_key)
    checked_ids, checked_offsets = checks.top_p_sets(ids, offsets, outputs, "meta_info top-p sets", SGLangResponseError)
    return list(checked_ids), list(checked_offsets)


def _logprob_entries(entries: Any, expected_ids: Sequence[int], where: str, missing: Missing) -> list[float | None]:
    return triple_logprobs(
        entries, expected_ids, where, SGLangResponseError, missing=missing, value_error=SGLangInvalidSampleError
    )


def _checked_header(raw: dict[str, Any], sent: int, expanded: bool) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
    """``output_ids``, ``meta_info`` and ``finish_reason`` of a ``/generate`` reply, checked against the request."""
    output_ids = raw.get("output_ids")
    meta = raw.get("meta_info")
    if not isinstance(meta, dict):
        raise SGLangResponseError("/generate reply has no meta_info object")
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict):
        raise SGLangResponseError(f"/generate reply has an unknown finish_reason {finish!r:.200}")
    checks.finish_reason(finish.get("type"), "/generate reply", SGLangResponseError)
    if finish.get("matched") == NAN_STOP:
        raise SGLangInvalidSampleError(
            "/generate reply stopped with 'NaN happened': the server sampled an id outside the vocabulary and "
            "replaced it with a stop token, so the turn's last token was never sampled by the model"
        )
    if not checks.is_token_id_list(output_ids):
        raise SGLangResponseError("/generate reply has no output_ids list of token ids")
    if finish["type"] != "abort":
        if not output_ids:
            raise SGLangResponseError("/generate reply finished without generating any token")
        prompt_tokens = meta.get("prompt_tokens")
        if expanded and type(prompt_tokens) is int and prompt_tokens >= sent:
            pass
        elif prompt_tokens != sent:
            raise SGLangResponseError(f"server counted {prompt_tokens!r} prompt tokens, {sent} were sent")
    return output_ids, meta, finish


def _weight_versions(
    meta: dict[str, Any], output_length: int, finish: FinishReason
) -> tuple[tuple[WeightVersionSpan, ...], str | None]:
    """Which weights sampled which output tokens (``utils/weight_versions.py:66-107``) and the last version."""
    version = None if meta.get("weight_version") is None else str(meta["weight_version"])
    if finish == "abort":
        return (), version
    where = "/generate reply's weight_versions"
    return weight_versions_of(meta.get("weight_versions"), version, output_length, where, SGLangResponseError)


def parse_reply(
    raw: dict[str, Any],
    input_ids: Sequence[int],
    new_prompt: int,
    logprob_start: int,
    *,
    want_logprobs: bool,
    want_routed: bool,
    expanded: bool = False,
) -> Generation:
    """Validate a ``/generate`` reply against the request (the prompt ``input_ids``, its ``new_prompt`` new tokens,
    the ``logprob_start`` sent, whether logprobs and routed experts were asked for) before anything is recorded: a
    protocol break raises :class:`SGLangResponseError`, an untrainable sample :class:`SGLangInvalidSampleError`.
    ``expanded``: the request carried images, so the server counts the prompt after expanding each placeholder."""
    output_ids, meta, finish = _checked_header(raw, len(input_ids), expanded)
    finish_type = cast(FinishReason, finish["type"])

    output_logprobs = prompt_logprobs = None
    if want_logprobs and finish_type != "abort":
        output_logprobs = _logprob_entries(
            meta.get("output_token_logprobs"), output_ids, "output_token_logprobs", "never"
        )
        if logprob_start >= 0:
            entries = meta.get("input_token_logprobs")
            expected = list(input_ids[logprob_start:])
            # Keep only the new prompt tokens; the first entry (null by protocol) is an already recorded token.
            prompt_logprobs = _logprob_entries(entries, expected, "input_token_logprobs", "first")[-new_prompt:]

    routed = None
    if want_routed and finish_type != "abort":
        routed = meta.get("routed_experts")
        if not isinstance(routed, str):
            raise SGLangResponseError(
                "routed experts were requested but the reply has none"
                " (start SGLang with --enable-return-routed-experts)"
            )

    text = raw.get("text")
    if not isinstance(text, str):
        raise SGLangResponseError("/generate reply has no text")
    runs, version = _weight_versions(meta, len(output_ids), finish_type)
    latency = meta.get("e2e_latency")
    return Generation(
        output_ids=output_ids,
        output_logprobs=output_logprobs,
        prompt_logprobs=prompt_logprobs,
        text=text,
        finish_reason=finish_type,
        matched_stop=finish.get("matched"),
        cached_tokens=int(meta["cached_tokens"]) if isinstance(meta.get("cached_tokens"), int) else None,
        completion_tokens=len(output_ids),
        latency_s=float(latency) if isinstance(latency, int | float) else None,
        request_id=meta.get("id") if isinstance(meta.get("id"), str) else None,
        weight_version=version,
        weight_versions=runs,
        routed_experts=routed,
        source="/generate",
        aborted=str(finish) if finish_type == "abort" else None,
    )
