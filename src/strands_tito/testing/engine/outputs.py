"""Turning scripted token ids into ``/generate`` response bodies the way SGLang 0.5.23 would shape them.

Covers stop handling (``Req.update_finish_state`` order: an id outside the vocabulary, stop strings, stop ids, then
length), text trimming (``trim_matched_stop``), logprob lists (``null`` where SGLang's orjson writes a NaN), weight
versions, routed experts, cumulative stream chunks and deliberate malformation.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from strands_tito.testing.engine.protocol import (
    GenerateRequest,
    SamplingParams,
    encode_routed_experts,
    finish_abort,
    finish_length,
    finish_stop,
    routed_experts_for,
    token_logprob,
)
from strands_tito.testing.engine.script import Fault, MalformedKind, Reply

__all__ = ["NAN_STOP", "Outcome", "OutputBuilder"]

#: The stop SGLang reports for a sampled id outside the vocabulary (``schedule_batch.py:1989``).
NAN_STOP = "NaN happened"


@dataclass
class Outcome:
    """The tokens one request produced and how it finished; ``success`` False leaves the conversation history at
    the prompt (faults, aborts)."""

    out: list[int] = field(default_factory=list)
    finish: dict[str, Any] | None = None
    success: bool = True
    #: Output positions whose logprob is NaN (sent as ``null``, as orjson writes NaN).
    nan_positions: frozenset[int] = frozenset()
    #: ``meta_info.weight_versions`` of the finished reply (set by the endpoint).
    weight_versions: list[dict[str, Any]] = field(default_factory=list)
    #: An abort of a request still in the waiting queue (SGLang's shorter meta_info).
    waiting: bool = False


def top_p_sets_for(token_ids: Sequence[int], generated: int, vocab_size: int) -> tuple[list[int], list[int]]:
    """The kept token sets of the last ``generated`` tokens of ``token_ids`` (slime's SGLang top-p patch, emulated).

    Each set holds the sampled token first, then 0 to 3 other ids, a pure function of (token id, position):
    ``(token_ids, offsets)`` flattened, ``generated + 1`` row ends from 0.
    """
    ids: list[int] = []
    offsets = [0]
    start = len(token_ids) - generated
    for position in range(start, len(token_ids)):
        token = token_ids[position]
        h = (token * 2654435761 + position * 40503) % 10007
        ids.append(token)
        ids.extend(o for o in ((token + 1 + h * (k + 1)) % vocab_size for k in range(h % 4)) if o != token)
        offsets.append(len(ids))
    return ids, offsets


def encode_int32(values: Sequence[int]) -> str:
    """Base64 of raw little-endian int32 (how SGLang and slime's top-p patch put int arrays in ``meta_info``)."""
    return base64.b64encode(np.asarray(values, dtype="<i4").tobytes()).decode("ascii")


class OutputBuilder:
    """Tokenizer-aware construction of ``/generate`` bodies."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        eos_token_ids: Sequence[int],
        routed_experts: tuple[int, int, int] | None,
    ) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.routed_experts = routed_experts
        self.vocab_size = len(tokenizer)

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool) -> str:
        """``tokenizer.decode`` as a plain ``str``."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def _replay_fields(self, meta: dict[str, Any], generate: GenerateRequest, ids: list[int], generated: int) -> None:
        """A finished reply's routed experts (R3) and top-p sets (slime's SGLang patch), when asked for."""
        if self.routed_experts is not None and generate.return_routed_experts:
            num_layers, top_k, num_experts = self.routed_experts
            array = routed_experts_for(ids, generate.routed_experts_start_len, num_layers, top_k, num_experts)
            meta["routed_experts"] = encode_routed_experts(array)
        custom = generate.sampling.raw.get("custom_params")
        if isinstance(custom, dict) and custom.get("return_top_p_token_ids"):
            # The kept ids per generated token, flattened, and the row ends (base64 int32, as the patch sends).
            kept, offsets = top_p_sets_for(ids, generated, self.vocab_size)
            meta["top_p_token_ids"] = encode_int32(kept)
            meta["top_p_token_offsets"] = encode_int32(offsets)

    def reply_ids(self, reply: Reply) -> list[int]:
        """The token ids a reply emits before any stop handling."""
        if reply.ids is not None:
            return list(reply.ids)
        ids = list(self.tokenizer.encode(reply.text, add_special_tokens=False)) if reply.text else []
        if reply.eos and self.eos_token_ids:
            ids.append(self.eos_token_ids[0])
        return ids

    def reply_outcome(self, reply: Reply, sampling: SamplingParams, max_new: int) -> Outcome:
        """What a scripted reply answers: its ids cut by the stop rules (:meth:`apply_stops`), with the reply's own
        ``finish`` reported instead of the computed one when the script gives it."""
        outcome = self.apply_stops(self.reply_ids(reply), sampling, max_new)
        if reply.finish is not None:
            outcome.finish = dict(reply.finish)
        return outcome

    def aborted_outcome(self, fault: Fault, max_new: int) -> Outcome:
        """What an abort without a status answers: the fault's partial reply (if any) up to ``max_new`` tokens,
        finished as ``abort`` with the fault's message."""
        partial = self.reply_ids(fault.reply) if fault.reply is not None else []
        return Outcome(partial[: max(max_new, 0)], finish_abort(fault.message or "Aborted"), success=False)

    def apply_stops(self, ids: Sequence[int], sampling: SamplingParams, max_new: int) -> Outcome:
        """Cut ``ids`` as SGLang 0.5.23's ``Req.update_finish_state`` does (``schedule_batch.py:2007-2045``): an id
        outside the vocabulary first (replaced by a stop id, then EOS, and finished as "NaN happened",
        ``_check_vocab_boundary_finish``, ``:1977-1993``), then stop strings, then stop ids and EOS, and only then
        the length cap, so EOS sampled as the last allowed token is a ``stop``."""
        if max_new <= 0:
            return Outcome([], finish_length(max(max_new, 0)))
        stop_ids = set() if sampling.ignore_eos else {*sampling.stop_token_ids, *self.eos_token_ids}
        out: list[int] = []
        for token in ids:
            if token >= self.vocab_size:
                replacement = next(iter(sampling.stop_token_ids), token)
                replacement = self.eos_token_ids[0] if self.eos_token_ids else replacement
                out.append(replacement)
                return Outcome(out, finish_stop(NAN_STOP), nan_positions=frozenset({len(out) - 1}))
            out.append(token)
            if sampling.stop:
                decoded = self.decode(out, skip_special_tokens=False)
                for stop in sampling.stop:
                    if stop in decoded:
                        return Outcome(out, finish_stop(stop))
            if token in stop_ids:
                return Outcome(out, finish_stop(token))
            if len(out) >= max_new:
                return Outcome(out, finish_length(max_new))
        # A script that runs out without a stop condition looks like a model that hit the cap.
        return Outcome(out, finish_length(max_new))

    def final_text(self, out: list[int], finish: dict[str, Any] | None, sampling: SamplingParams) -> str:
        """``detokenizer_manager.trim_matched_stop`` applied to the decoded output."""
        matched = finish.get("matched") if finish is not None and finish.get("type") == "stop" else None
        trim = not sampling.no_stop_trim
        ids = out
        # detokenizer_manager.py:194-226 tests `matched is None`, so a stop on token id 0 is trimmed too.
        if trim and isinstance(matched, int) and not isinstance(matched, bool) and out:
            ids = out[:-1]
        text = self.decode(ids, skip_special_tokens=sampling.skip_special_tokens)
        if isinstance(matched, str):
            position = text.find(matched)
            if position != -1:  # no_stop_trim keeps the stop string and drops what was decoded after it
                text = text[: position + (0 if trim else len(matched))]
        return text

    # -- logprobs --------------------------------------------------------------------------------------------------

    def _token_text(self, token: int, with_text: bool) -> str | None:
        return self.decode([token], skip_special_tokens=False) if with_text else None

    def top_entries(self, position: int, actual: int, count: int, with_text: bool) -> list[list[Any]]:
        """The ``count`` best ``[logprob, token, text]`` at ``position`` (``actual`` and synthetic neighbours)."""
        candidates = {actual}
        step = 1
        while len(candidates) < count + 1 and step < 4 * count + 8:
            candidates.add((actual + step * 7919) % self.vocab_size)
            step += 1
        scored = sorted(((token_logprob(token, position), token) for token in candidates), reverse=True)[:count]
        return [[logprob, token, self._token_text(token, with_text)] for logprob, token in scored]

    def _ids_entries(self, position: int, ids: Sequence[int], with_text: bool) -> list[list[Any]]:
        return [[token_logprob(token, position), token, self._token_text(token, with_text)] for token in ids]

    def _input_logprob_fields(self, generate: GenerateRequest, prompt: list[int]) -> dict[str, list[Any]]:
        with_text = generate.return_text_in_logprobs
        start = generate.logprob_start_len
        positions = range(start, len(prompt)) if start >= 0 else range(0)
        fields: dict[str, list[Any]] = {
            "input_token_logprobs": [
                [None if j == 0 else token_logprob(prompt[p], p), prompt[p], self._token_text(prompt[p], with_text)]
                for j, p in enumerate(positions)
            ]
        }
        if generate.top_logprobs_num > 0:
            fields["input_top_logprobs"] = [
                None if j == 0 else self.top_entries(p, prompt[p], generate.top_logprobs_num, with_text)
                for j, p in enumerate(positions)
            ]
        if generate.token_ids_logprob is not None:
            fields["input_token_ids_logprobs"] = [
                None if j == 0 else self._ids_entries(p, generate.token_ids_logprob, with_text)
                for j, p in enumerate(positions)
            ]
        return fields

    # -- bodies ----------------------------------------------------------------------------------------------------

    def _body(  # noqa: PLR0917  the response's fields as both endpoints build them
        self,
        generate: GenerateRequest,
        prompt: list[int],
        out: list[int],
        finish: dict[str, Any] | None,
        cached: int,
        received: float,
        text: str,
        input_fields: dict[str, list[Any]],
        outcome: Outcome,
    ) -> dict[str, Any]:
        """One response object, or a cumulative stream chunk when ``finish`` is None."""
        versions = outcome.weight_versions
        meta: dict[str, Any] = {"id": generate.rid, "finish_reason": finish}
        if not (outcome.waiting and finish is not None):
            meta["prompt_tokens"] = len(prompt)
        # Overwritten with the last span's version (weight_versions.py:107).
        meta["weight_version"] = versions[-1]["version"] if versions else "default"
        if not outcome.waiting:
            meta["num_retractions"] = 0
        if generate.return_logprob:
            meta.update(self._logprob_meta(generate, prompt, out, input_fields, outcome.nan_positions))
        if outcome.waiting and finish is not None:  # tokenizer_manager.py:3590-3640: no prompt or cache counts
            meta["e2e_latency"] = time.time() - received
            meta["weight_versions"] = versions
            meta["completion_tokens"] = len(out)
            return {"text": text, "output_ids": list(out), "meta_info": meta}
        meta["reasoning_tokens"] = 0
        meta["completion_tokens"] = len(out)
        meta["cached_tokens"] = cached
        if finish is not None and versions:  # every finished reply (tokenizer_manager.py:2559-2568)
            meta["weight_versions"] = versions
        meta["cached_tokens_details"] = None
        if finish is not None:
            self._replay_fields(meta, generate, prompt + out, len(out))
        meta["dp_rank"] = 0
        if finish is not None:
            now = time.time()
            meta["e2e_latency"] = now - received
            meta["response_sent_to_client_ts"] = now
        body: dict[str, Any] = {"text": text, "output_ids": list(out), "meta_info": meta}
        if generate.return_prompt_token_ids:
            body["prompt_token_ids"] = list(prompt)
        return body

    def _logprob_meta(
        self,
        generate: GenerateRequest,
        prompt: list[int],
        out: list[int],
        input_fields: dict[str, list[Any]],
        nan: frozenset[int],
    ) -> dict[str, Any]:
        """The logprob fields of ``meta_info``; a NaN logprob (``nan``) is ``null``, as orjson writes it."""
        fields: dict[str, Any] = {}
        with_text = generate.return_text_in_logprobs
        base = len(prompt)
        fields["input_token_logprobs"] = input_fields.get("input_token_logprobs", [])
        fields["output_token_logprobs"] = [
            [None if i in nan else token_logprob(token, base + i), token, self._token_text(token, with_text)]
            for i, token in enumerate(out)
        ]
        fields["output_token_logprobs_length"] = len(out)
        if generate.top_logprobs_num > 0:
            fields["input_top_logprobs"] = input_fields.get("input_top_logprobs", [])
            fields["output_top_logprobs"] = [
                self.top_entries(base + i, token, generate.top_logprobs_num, with_text) for i, token in enumerate(out)
            ]
        if generate.token_ids_logprob is not None:
            fields["input_token_ids_logprobs"] = input_fields.get("input_token_ids_logprobs", [])
            fields["output_token_ids_logprobs"] = [
                self._ids_entries(base + i, generate.token_ids_logprob, with_text) for i in range(len(out))
            ]
        return fields

    def bodies(
        self, generate: GenerateRequest, prompt: list[int], outcome: Outcome, cached: int, received: float
    ) -> list[dict[str, Any]]:
        """The final body, preceded by one cumulative unfinished chunk per output token when streaming."""
        input_fields = self._input_logprob_fields(generate, prompt) if generate.return_logprob else {}
        bodies: list[dict[str, Any]] = []
        if generate.stream:
            previous = ""
            for size in range(1, len(outcome.out)):
                partial = outcome.out[:size]
                text = self.decode(partial, skip_special_tokens=generate.sampling.skip_special_tokens)
                if text.endswith("\ufffd"):
                    text = previous  # the detokenizer holds back an incomplete UTF-8 sequence
                previous = text
                chunk = self._body(generate, prompt, partial, None, cached, received, text, input_fields, outcome)
                bodies.append(chunk)
        text = self.final_text(outcome.out, outcome.finish, generate.sampling)
        final = self._body(generate, prompt, outcome.out, outcome.finish, cached, received, text, input_fields, outcome)
        bodies.append(final)
        return bodies

    def malform(self, kind: MalformedKind, body: dict[str, Any], prompt: list[int]) -> None:
        """Break ``body`` in place (the serialization-level kinds ``non_json``/``truncated_body`` are left alone)."""
        meta = body["meta_info"]
        out: list[int] = body["output_ids"]
        entries = meta.get("output_token_logprobs")
        if entries is None:
            base = len(prompt)
            entries = [[token_logprob(token, base + i), token, None] for i, token in enumerate(out)]
        if kind == "missing_output_ids":
            del body["output_ids"]
        elif kind == "logprobs_wrong_length":
            meta["output_token_logprobs"] = entries[:-1] if entries else [[-0.5, 0, None]]
        elif kind in ("nan_logprob", "inf_logprob"):
            # orjson writes a NaN or infinite logprob as null (http_server.py:987, utils/json_response.py:12-17).
            eos = self.eos_token_ids[0] if self.eos_token_ids else 0
            entries = [list(entry) for entry in entries] or [[0.0, eos, None]]
            entries[0][0] = None
            meta["output_token_logprobs"] = entries
        elif kind == "missing_meta_info":
            del body["meta_info"]
        elif kind == "wrong_types":
            body["output_ids"] = json.dumps(out)
            meta["completion_tokens"] = str(meta["completion_tokens"])
