"""The engine core: the served model's settings and the state every endpoint shares, behind a public API.

:class:`EngineCore` owns the tokenizer and output builder, the conversation tracker (scripts, conversations, prefix
cache), the records, the requests in flight with their abort flags, and the paused/running switch. The endpoint
modules (:mod:`~strands_tito.testing.engine.sglang_api`, :mod:`~strands_tito.testing.engine.openai_chat`,
:mod:`~strands_tito.testing.engine.vllm_api`, :mod:`~strands_tito.testing.engine.admin`) use only this API;
:class:`~strands_tito.testing.engine.server.LocalEngine` builds one core and wires the endpoints to it.

A request's lifecycle is :meth:`EngineCore.schedule`: hold it while generation is paused, attribute it to a
conversation and take the conversation's next scripted step, wait out a slow step, and notice an abort or a client
that hangs up meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase

from strands_tito.testing.engine.conversations import Conversation, ConversationTracker
from strands_tito.testing.engine.outputs import OutputBuilder
from strands_tito.testing.engine.records import DISCONNECTED_STATUS, EngineRecord
from strands_tito.testing.engine.script import DEFAULT_REPLY, Fault, Reply, Script, Step
from strands_tito.testing.http_server import AnyResponse, Connection, RawResponse

__all__ = ["EngineCore", "Speculative", "weight_version_spans"]

#: SGLang's algorithms that reserve context for draft tokens: ``is_eagle()`` is true for EAGLE, EAGLE3 and
#: FROZEN_KV_MTP (``srt/speculative/spec_info.py:102-109``), and NEXTN is EAGLE (``spec_registry.py:183``).
EAGLE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "FROZEN_KV_MTP", "NEXTN"})


@dataclass(frozen=True)
class Speculative:
    """A speculative-decoding server's settings, under SGLang's server-argument names."""

    speculative_algorithm: str
    speculative_eagle_topk: int = 1
    speculative_num_steps: int = 3
    speculative_num_draft_tokens: int = 4

    @property
    def reserved_tokens(self) -> int:
        """Context SGLang reserves per request for draft tokens: ``compute_num_reserved_tokens``
        (``srt/managers/utils.py:484-500``), R = max(topk x steps, draft tokens) for EAGLE-like algorithms, else 0."""
        if self.speculative_algorithm.upper() not in EAGLE_ALGORITHMS:
            return 0
        return max(self.speculative_eagle_topk * self.speculative_num_steps, self.speculative_num_draft_tokens)


def weight_version_spans(start_version: str, current: str, output_tokens: int) -> list[dict[str, Any]]:
    """``meta_info.weight_versions`` of a finished request (``srt/utils/weight_versions.py:66-107``): one span per
    version, half-open output offsets. A request whose weights changed while it ran is split at its midpoint (the
    engine has no real step at which the update landed)."""
    if start_version == current or output_tokens < 2:
        return [{"version": current, "start": 0, "end": output_tokens}]
    middle = output_tokens // 2
    return [
        {"version": start_version, "start": 0, "end": middle},
        {"version": current, "start": middle, "end": output_tokens},
    ]


logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Flight:
    rid: str
    aborted: asyncio.Event = field(default_factory=asyncio.Event)


class _Disconnected(Exception):
    """The client went away while the request was waiting."""


#: Builds the answer of a request that was aborted before its step ran (the conversation if it had one).
OnAbort = Callable[[Conversation | None], AnyResponse]
#: Builds the answer from the conversation and its scripted step (None: no step left and no default reply).
OnStep = Callable[[Conversation, Step | None], AnyResponse]


class EngineCore:
    """The served model and the shared state of one local engine.

    Attributes:
        tokenizer, eos_token_ids, vocab_size: the model's tokenizer and stop ids.
        outputs: the :class:`~strands_tito.testing.engine.outputs.OutputBuilder` (stops, text, logprobs, bodies).
        conversations: the :class:`~strands_tito.testing.engine.conversations.ConversationTracker`.
        default: the reply for requests with no scripted step left (None: those get an error).
        context_length, max_req_len, max_req_input_len: SGLang's length limits.
        weight_version, speculative, reserved_tokens: the weights' version and the speculative-decoding settings.
        model_path, routed_experts, image_understanding, image_token_id: what the info endpoints report.
        started_at: when the server started listening.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        default: Reply | None = DEFAULT_REPLY,
        *,
        context_length: int = 32768,
        model_path: str = "strands-tito/local-engine",
        routed_experts: tuple[int, int, int] | None = None,
        eos_token_ids: Sequence[int] | None = None,
        record_path: str | os.PathLike[str] | None = None,
        image_understanding: bool = False,
        image_token_id: int | None = None,
        weight_version: str = "default",
        speculative: Speculative | None = None,
    ) -> None:
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
        self.record_path = Path(record_path) if record_path is not None else None
        self.image_understanding = image_understanding
        self.image_token_id = image_token_id
        #: The served weights' version (``--weight-version``; ``POST /update_weight_version`` changes it).
        self.weight_version = weight_version
        self.launch_weight_version = weight_version
        self.speculative = speculative
        #: Context reserved per request for draft tokens (0 without EAGLE-like speculative decoding).
        self.reserved_tokens = speculative.reserved_tokens if speculative is not None else 0
        tokenizer_eos = tokenizer.eos_token_id
        if eos_token_ids is not None:
            self.eos_token_ids: tuple[int, ...] = tuple(eos_token_ids)
        elif isinstance(tokenizer_eos, int):
            self.eos_token_ids = (tokenizer_eos,)
        else:
            self.eos_token_ids = ()
        self.vocab_size = len(tokenizer)
        self.outputs = OutputBuilder(tokenizer, self.eos_token_ids, routed_experts)
        self.conversations = ConversationTracker(lambda ids: self.outputs.decode(ids, skip_special_tokens=False))
        # SGLang: max_req_len = context_len - 1 (ample KV cache assumed), max_req_input_len = max_req_len - 5.
        self.max_req_len = context_length - 1
        self.max_req_input_len = self.max_req_len - 5
        self.started_at = time.time()
        self._records_lock = threading.Lock()
        self._records: list[EngineRecord] = []
        self._flights: set[_Flight] = set()
        self._running: asyncio.Event | None = None

    # -- scripts and records ---------------------------------------------------------------------------------------

    def add_script(self, script: Script) -> None:
        """Make ``script`` available to new conversations (thread-safe)."""
        self.conversations.add_script(script)

    def record(self, record: EngineRecord) -> None:
        """Keep ``record`` (and append it to the record file, if any)."""
        with self._records_lock:
            self._records.append(record)
            if self.record_path is not None:
                try:
                    with self.record_path.open("a", encoding="utf-8") as handle:
                        handle.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
                except OSError:
                    logger.exception("could not append to record file %s", self.record_path)

    @property
    def records(self) -> list[EngineRecord]:
        """A snapshot of all records so far, oldest first."""
        with self._records_lock:
            return list(self._records)

    def decode_token(self, token: int) -> str:
        """One token's text, special tokens included."""
        return self.outputs.decode([token], skip_special_tokens=False)

    # -- running, paused, aborted ----------------------------------------------------------------------------------

    def open(self) -> None:
        """Called by the server once it listens (inside its event loop): generation is running."""
        self._running = asyncio.Event()
        self._running.set()
        self.started_at = time.time()

    @property
    def busy(self) -> bool:
        """Whether any request is in flight (SGLang then refuses to flush its cache)."""
        return bool(self._flights)

    def abort(self, rid: str | None, abort_all: bool = False) -> None:
        """Abort the pending request ``rid`` (or all of them)."""
        for flight in self._flights:
            if abort_all or flight.rid == rid:
                flight.aborted.set()

    def pause(self) -> None:
        """Hold new requests until :meth:`resume`."""
        if self._running is not None:
            self._running.clear()

    def resume(self) -> None:
        """Let held requests go on."""
        if self._running is not None:
            self._running.set()

    # -- the request lifecycle -------------------------------------------------------------------------------------

    async def schedule(
        self,
        rid: str,
        prompt: list[int],
        record: EngineRecord,
        conn: Connection,
        *,
        cache_cap: int,
        on_abort: OnAbort,
        on_step: OnStep,
        rerendered: bool = False,
    ) -> AnyResponse:
        """Run one request through the engine and answer it with ``on_abort`` or ``on_step``.

        A paused engine holds the request first; then it is attributed to a conversation (its step, conversation,
        script, fault and ``cached_tokens`` noted on ``record``, prefix reuse capped at ``cache_cap``) and a slow
        step is waited out. An abort meanwhile answers with ``on_abort``; a client that hangs up gets nothing and a
        499 record. Errors raised by the callbacks propagate to the endpoint.
        """
        flight = _Flight(rid)
        self._flights.add(flight)
        conversation: Conversation | None = None
        try:
            assert self._running is not None
            if not self._running.is_set() and await self._wait(0.0, conn, flight) == "aborted":
                return on_abort(None)
            conversation, step = self._assign(prompt, cache_cap, record, rerendered)
            delay = step.delay if step is not None else 0.0
            if (delay > 0 or flight.aborted.is_set()) and await self._wait(delay, conn, flight) == "aborted":
                return on_abort(conversation)
            return on_step(conversation, step)
        except _Disconnected:
            # SGLang aborts a request whose client went away; nothing is sent.
            record.status = DISCONNECTED_STATUS
            record.disconnected = True
            self.conversations.finish(conversation, prompt, prompt)
            self.record(record)
            return RawResponse(b"")
        finally:
            self._flights.discard(flight)
            if conversation is not None:
                self.conversations.release(conversation)

    def _assign(
        self, prompt: list[int], cap: int, record: EngineRecord, rerendered: bool
    ) -> tuple[Conversation, Step | None]:
        assignment = self.conversations.assign(prompt, self.default, cap, rerendered=rerendered)
        record.conversation = assignment.conversation.index
        record.script = assignment.conversation.script
        record.unscripted = assignment.unscripted
        record.cached_tokens = assignment.cached_tokens
        if isinstance(assignment.step, Fault):
            record.fault = assignment.step.label
        return assignment.conversation, assignment.step

    async def _wait(self, delay: float, conn: Connection, flight: _Flight) -> Literal["done", "aborted"]:
        """Wait out ``delay`` (and any pause); raise _Disconnected if the client leaves, report an abort."""
        running = self._running
        assert running is not None
        deadline = asyncio.get_running_loop().time() + delay
        while True:
            if conn.disconnected.is_set():
                raise _Disconnected
            if flight.aborted.is_set():
                return "aborted"
            remaining = deadline - asyncio.get_running_loop().time()
            if running.is_set() and remaining <= 0:
                return "done"
            waiters = [
                asyncio.ensure_future(conn.disconnected.wait()),
                asyncio.ensure_future(flight.aborted.wait()),
            ]
            if not running.is_set():
                waiters.append(asyncio.ensure_future(running.wait()))
            try:
                await asyncio.wait(
                    waiters, timeout=remaining if running.is_set() else None, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()

    def finish(self, conversation: Conversation | None, prompt: list[int], out: Sequence[int], success: bool) -> None:
        """Close a request that generated ``out``: the history moves on only on success; the cache keeps what has
        KV, which is all but the last sampled token (``kv_committed_len``; ``schedule_batch.py:1766-1776``)."""
        sequence = [*prompt, *out]
        self.conversations.finish(conversation, sequence if success else prompt, sequence[:-1] if out else sequence)

    def finish_fault(self, conversation: Conversation, prompt: list[int]) -> None:
        """Close a request answered with an error: the history stays at the prompt, nothing is cached."""
        self.conversations.finish(conversation, prompt, ())
