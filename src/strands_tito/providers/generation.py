"""What a provider sends and gets back: one :class:`GenerationRequest`, one validated :class:`Generation`.

:class:`~strands_tito.providers.token_model.TokenModel` builds the request; a provider's ``_generate`` sends it and
checks the reply with :func:`finite_logprob` and :func:`check_token_ids` (``reply_checks`` holds their array-at-once
forms), raising its own :class:`TokenResponseError` or :class:`TokenAbortedError` subclass. Everything here is
re-exported by ``strands_tito.providers.token_model``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from strands_tito import checks
from strands_tito.checks import FinishReason, WeightVersionSpan
from strands_tito.errors import GenerationError

__all__ = [
    "Generation",
    "GenerationRequest",
    "InvalidSampleError",
    "TokenAbortedError",
    "TokenResponseError",
    "check_token_ids",
    "finite_logprob",
    "weight_versions_of",
]


def _naming(backend_name: str, message: str) -> str:
    prefix = f"{backend_name}: " if backend_name else ""
    return message if message.startswith(prefix) else prefix + message


class TokenResponseError(GenerationError):
    """A reply does not follow the server's protocol (missing fields, wrong lengths, NaN, ...).

    Nothing from the reply is recorded. Each provider raises its own subclass, whose messages open with its backend.
    """

    #: The backend whose reply this is, as the message names it (set by each provider's subclass).
    backend_name: ClassVar[str] = ""

    def __init__(self, message: str) -> None:
        super().__init__(_naming(self.backend_name, message))


class InvalidSampleError(TokenResponseError):
    """The server's sampling failed numerically, so the turn is refused and nothing is recorded.

    Either a logprob the turn needs is missing or unusable (SGLang sends ``null`` for a NaN or infinite logprob, vLLM
    ``-9999.0``; a value float32 cannot hold), or SGLang ended the request with ``{"type": "stop", "matched": "NaN
    happened"}`` (a sampled id outside the vocabulary, replaced by EOS: the last token was never sampled). Recording
    such a turn would put an invented number into training data. Each provider raises its own subclass.
    """


class TokenAbortedError(GenerationError):
    """The server aborted the generation: an error, never a normal turn. Each provider raises its own subclass,
    whose messages open with its backend."""

    #: The backend that aborted, as the message names it (set by each provider's subclass).
    backend_name: ClassVar[str] = ""

    def __init__(self, message: str) -> None:
        super().__init__(_naming(self.backend_name, message))


@dataclass(frozen=True)
class GenerationRequest:
    """One generation a provider must send.

    Attributes:
        input_ids: The whole prompt: the trajectory so far plus the new prompt tokens (a read-only sequence, the
            trajectory's ids are not copied: :class:`~strands_tito.trajectory.PromptIds`; ``list()`` makes a list).
        input_ids_json: The same as JSON array text, built incrementally (request bodies embed it as it is).
        new_prompt: How many tokens at the end of ``input_ids`` are new (not yet in the trajectory).
        recorded: Tokens the trajectory already holds (0 on the first turn).
        sampling_params: Server sampling parameters, the token cap already fitted to the context window.
        return_logprob: Whether the turn's logprobs are to be recorded.
        record: False for a generation that is not part of any trajectory (structured output).
        cancel_signal: Drop the request when this is set while it is in flight.
        image_data: The images of the whole prompt as data URLs, in prompt order (one placeholder token each in
            ``input_ids``; the server expands them). Empty for a text-only prompt.
    """

    input_ids: Sequence[int]
    new_prompt: int
    recorded: int
    sampling_params: dict[str, Any]
    return_logprob: bool
    record: bool = True
    cancel_signal: threading.Event | None = None
    input_ids_json: bytes | None = None
    image_data: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Generation:
    """A validated reply, ready to be recorded.

    ``prompt_logprobs`` covers the ``new_prompt`` tokens of the request (or is None), ``output_logprobs`` the
    ``output_ids``. ``aborted`` describes a server abort (``finish_reason == "abort"``). ``source`` names the endpoint
    in error messages.
    """

    output_ids: list[int]
    output_logprobs: list[float | None] | None
    prompt_logprobs: list[float | None] | None
    text: str
    finish_reason: FinishReason
    matched_stop: int | str | None
    cached_tokens: int | None  # None: the server did not report it
    completion_tokens: int
    latency_s: float | None
    request_id: str | None
    weight_version: str | None
    routed_experts: str | None
    source: str
    aborted: str | None = None
    routed_experts_layout: tuple[int, int, int] | None = None
    top_p: tuple[list[int], list[int]] | None = None
    """Top-p replay: ``(token_ids, offsets)`` the sampler kept at each output position (when asked for)."""
    weight_versions: tuple[WeightVersionSpan, ...] = ()
    """Which weights sampled which output tokens (SGLang's ``meta_info.weight_versions``, vLLM's
    ``choices[].weight_versions``); ``weight_version`` is the last one's."""


def weight_versions_of(
    spans: Any, version: Any, output_length: int, where: str, error: type[TokenResponseError]
) -> tuple[tuple[WeightVersionSpan, ...], str | None]:
    """A reply's weight-version runs and last version, the same for every server: its spans checked by
    :func:`strands_tito.checks.weight_version_spans`; a server that sends only one version (SGLang before
    ``weight_versions``) gets one run over the whole output."""
    runs = checks.weight_version_spans(spans, output_length, where, error)
    if runs:
        return runs, runs[-1].version
    if version is None or not output_length:
        return (), None if version is None else str(version)
    return (WeightVersionSpan(str(version), 0, output_length),), str(version)


def finite_logprob(value: Any, where: str, error: type[TokenResponseError]) -> float | None:
    """A logprob from a reply (:func:`strands_tito.checks.logprob_value`): None stays None, anything but a number
    float32 holds finitely raises ``error``."""
    return checks.logprob_value(value, where, error)


def check_token_ids(value: Any, where: str, error: type[TokenResponseError]) -> list[int]:
    """A list of token ids from a reply (:func:`strands_tito.checks.is_token_id_list`), or ``error``."""
    if not checks.is_token_id_list(value):
        raise error(f"{where} is not a list of token ids (non-negative int32 integers)")
    return value
