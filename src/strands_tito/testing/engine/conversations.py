"""Conversation tracking by token prefix, and the prefix cache behind ``cached_tokens``.

A request belongs to the conversation whose token history (last prompt + output on success, just the prompt after a
fault) is the longest prefix of its ``input_ids``; otherwise it opens a new conversation, which takes the first
unused (or repeating) script whose ``match`` is None or occurs in the decoded prompt.

Chat requests (``/v1/chat/completions``) are rendered by the server, so a later request of a conversation may not
extend its history exactly: the re-rendered assistant turn can tokenize differently from what was generated. For them
(``assign(..., rerendered=True)``) a request that matches no history falls back to a conversation whose *last prompt*
it strictly extends (drift starts after that prompt, inside the re-rendered reply); among several, the one whose
history shares the longest prefix with it wins. A prompt equal to an earlier first prompt (the same task started
again) extends nothing strictly and opens a new conversation.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strands_tito.testing.engine.script import Reply, Script, Step

__all__ = ["Assignment", "Conversation", "ConversationTracker"]


@dataclass
class Conversation:
    """One tracked conversation."""

    index: int
    history: list[int]
    script: int | None
    steps: deque[Step]
    busy: int = 0
    last_prompt: list[int] | None = None


@dataclass(frozen=True)
class Assignment:
    """Where a request went and what it must do."""

    conversation: Conversation
    step: Step | None
    unscripted: bool
    cached_tokens: int


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix; bisects with slice comparisons so long prompts stay cheap."""
    limit = min(len(a), len(b))
    if a[:limit] == b[:limit]:
        return limit
    low, high = 0, limit  # invariant: a[:low] == b[:low] and a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


class ConversationTracker:
    """Scripts, conversations and cached sequences; every method is thread-safe."""

    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self._lock = threading.Lock()
        self._scripts: list[Script] = []
        self._taken: list[bool] = []
        self._conversations: list[Conversation] = []
        self._cache: list[list[int]] = []

    def add_script(self, script: Script) -> None:
        """Make ``script`` available to new conversations."""
        with self._lock:
            self._scripts.append(script)
            self._taken.append(False)

    def assign(
        self, prompt: list[int], default: Reply | None, cache_cap: int, *, rerendered: bool = False
    ) -> Assignment:
        """Attribute a request to a conversation, pop its next step and compute ``cached_tokens``.

        Ties between equally long histories go to the conversation with fewer requests in flight, then the oldest.
        ``cache_cap`` bounds the reported prefix reuse (SGLang caps it at ``logprob_start_len`` and at
        ``len(prompt) - 1``). ``rerendered``: the prompt was rendered by the server from messages (chat requests),
        so fall back to the conversation whose last prompt it extends (see the module docstring).
        """
        with self._lock:
            best: Conversation | None = None
            for conversation in self._conversations:
                history = conversation.history
                if len(history) > len(prompt) or prompt[: len(history)] != history:
                    continue
                if best is None or (len(history), -conversation.busy) > (len(best.history), -best.busy):
                    best = conversation
            if best is None and rerendered:
                best = self._extended(prompt)
            if best is None:
                best = self._open(prompt)
            if rerendered:
                best.last_prompt = list(prompt)
            best.busy += 1
            cached = max(0, min(max((_common_prefix(s, prompt) for s in self._cache), default=0), cache_cap))
            if best.steps:
                return Assignment(best, best.steps.popleft(), False, cached)
            return Assignment(best, default, True, cached)

    def _extended(self, prompt: list[int]) -> Conversation | None:
        best: Conversation | None = None
        best_key = (0, 0)
        for conversation in self._conversations:
            last = conversation.last_prompt
            if last is None or len(last) >= len(prompt) or prompt[: len(last)] != last:
                continue
            key = (_common_prefix(conversation.history, prompt), -conversation.busy)
            if best is None or key > best_key:
                best, best_key = conversation, key
        return best

    def _open(self, prompt: list[int]) -> Conversation:
        decoded: str | None = None
        chosen: int | None = None
        for index, script in enumerate(self._scripts):
            if self._taken[index]:
                continue
            if script.match is not None:
                if decoded is None:
                    decoded = self._decode(prompt)
                if script.match not in decoded:
                    continue
            chosen = index
            break
        steps: deque[Step] = deque()
        if chosen is not None:
            self._taken[chosen] = not self._scripts[chosen].repeat
            steps.extend(self._scripts[chosen].expanded())
        conversation = Conversation(len(self._conversations), list(prompt), chosen, steps)
        self._conversations.append(conversation)
        return conversation

    def finish(self, conversation: Conversation | None, history: Sequence[int] | None, cached: Sequence[int]) -> None:
        """Close one request: set the conversation's history (if given) and remember ``cached`` in the prefix cache."""
        with self._lock:
            if conversation is not None and history is not None:
                conversation.history = list(history)
            if cached:
                self._remember(list(cached))

    def release(self, conversation: Conversation) -> None:
        """The request attributed to ``conversation`` is no longer in flight."""
        with self._lock:
            conversation.busy -= 1

    def _remember(self, sequence: list[int]) -> None:
        kept = []
        for existing in self._cache:
            if len(existing) <= len(sequence) and sequence[: len(existing)] == existing:
                continue  # superseded by the longer sequence
            if len(existing) >= len(sequence) and existing[: len(sequence)] == sequence:
                return  # already covered
            kept.append(existing)
        kept.append(sequence)
        self._cache = kept

    def flush_cache(self) -> None:
        """Forget all cached sequences (``/flush_cache``); conversations are kept."""
        with self._lock:
            self._cache.clear()

    def in_flight(self) -> int:
        """Requests currently attributed to a conversation and not finished."""
        with self._lock:
            return sum(conversation.busy for conversation in self._conversations)
