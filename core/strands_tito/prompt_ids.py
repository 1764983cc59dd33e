"""A request's whole prompt as a read-only view: the trajectory's ids so far and the new ones, not copied."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import overload

__all__ = ["PromptIds"]


class PromptIds(Sequence[int]):
    """A request's whole prompt: the first ids of an append-only list (a trajectory's ``token_ids``) and the new ones.

    Read-only and not a copy: a list of the whole context would be made, touched id by id and freed again on every
    model call, a cost that grows with the context. The ids it covers never change, since the trajectory only grows
    (:meth:`Trajectory.append_turn`). Compares equal to a list (or another ``PromptIds``) of the same ids; use
    ``list(ids)`` for a list.
    """

    __slots__ = ("_context", "_length", "_new")

    def __init__(self, context: list[int], new: list[int]) -> None:
        self._context = context
        self._length = len(context)
        self._new = new

    def __len__(self) -> int:
        return self._length + len(self._new)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        length = self._length
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if start >= length:
                return self._new[start - length : max(start, stop) - length]
            return self._context[start : min(stop, length)] + self._new[: max(0, stop - length)]
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError("prompt index out of range")
        return self._context[position] if position < length else self._new[position - length]

    def __iter__(self) -> Iterator[int]:
        return itertools.chain(itertools.islice(self._context, self._length), self._new)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptIds | list):
            return NotImplemented
        ids = other if isinstance(other, list) else list(other)
        length = self._length
        return len(self) == len(ids) and self._new == ids[length:] and self._context[:length] == ids[:length]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PromptIds({len(self)} ids: {self._length} recorded + {self._new!r})"
