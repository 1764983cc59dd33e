"""The scripted policy of the local engine: what it answers, request by request.

A :class:`Script` is an ordered list of steps for one conversation.  A step is either a :class:`Reply` (tokens to
emit) or a :class:`Fault` (an error or a broken response to inject).  :class:`ScriptFile` bundles the scripts and the
fallback reply and reads them from JSON::

    {"scripts": [{"match": "weather", "turns": [
                    {"fault": "http", "status": 503, "count": 2},
                    {"text": "<tool_call>...</tool_call>"},
                    {"ids": [9707, 151645], "delay": 0.5}]}],
     "default": {"text": "OK."}}

A bare string is also accepted as a step (``"Hi"`` = ``{"text": "Hi"}``); ``"default": null`` disables the fallback.
A script with ``"repeat": true`` serves every new conversation it matches instead of only the first.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

__all__ = [
    "BUILTIN_SCRIPTS",
    "DEFAULT_REPLY",
    "ContextOverflowVariant",
    "Fault",
    "FaultKind",
    "MalformedKind",
    "Reply",
    "Script",
    "ScriptFile",
    "Step",
    "step_from_dict",
]

FaultKind = Literal["http", "context_overflow", "abort", "malformed"]
MalformedKind = Literal[
    "missing_output_ids",
    "logprobs_wrong_length",
    "nan_logprob",
    "inf_logprob",
    "non_json",
    "truncated_body",
    "missing_meta_info",
    "wrong_types",
]
ContextOverflowVariant = Literal["input", "total", "scheduler", "kv_budget"]
#: ``waiting``: an abort of a request still in the waiting queue (SGLang's shorter reply); ``running``: the rest.
AbortVariant = Literal["running", "waiting"]

_MALFORMED_KINDS: tuple[str, ...] = get_args(MalformedKind)
_OVERFLOW_VARIANTS: tuple[str, ...] = get_args(ContextOverflowVariant)


def _check_delay(delay: float) -> None:
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")


@dataclass(frozen=True)
class Reply:
    """Emit tokens.

    Args:
        text: encoded with ``tokenizer.encode(text, add_special_tokens=False)``; the eos id is appended if ``eos``.
        ids: sent exactly as given (include the stop token yourself; an id beyond the vocabulary ends the reply with
            SGLang's "NaN happened" stop).  Give ``text`` or ``ids``, not both; with
            neither the reply is empty (just the eos token when ``eos``).
        eos: append the tokenizer's eos id to ``text``.  Ignored for ``ids``.
        delay: seconds to wait before answering (a slow reply; a client that hangs up meanwhile is recorded as
            disconnected).
        finish: report this ``finish_reason`` object verbatim instead of the computed one.

    The usual sampling rules still apply to the emitted tokens: ``max_new_tokens`` cuts the reply (finish
    ``length``), and the first stop token or stop string ends it.  A reply that runs out without meeting a stop
    condition is reported as ``{"type": "length", "length": max_new_tokens}``, as if the model had hit the cap.
    """

    text: str | None = None
    ids: Sequence[int] | None = None
    eos: bool = True
    delay: float = 0.0
    finish: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.text is not None and self.ids is not None:
            raise ValueError("Reply takes text or ids, not both")
        if self.ids is not None:
            ids = tuple(self.ids)
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise ValueError(f"Reply ids must be non-negative ints, got {list(ids)!r}")
            object.__setattr__(self, "ids", ids)
        if self.finish is not None:
            if "type" not in self.finish:
                raise ValueError(f"Reply finish needs a 'type' key, got {dict(self.finish)!r}")
            object.__setattr__(self, "finish", dict(self.finish))
        _check_delay(self.delay)

    @property
    def count(self) -> int:
        """A reply always answers exactly one request."""
        return 1


#: Script files shipped with the package, loadable by name (``strands-tito engine --script quickstart``):
#: ``quickstart`` answers every conversation with a ``multiply`` call for 25 and 17, then with the product.
BUILTIN_SCRIPTS: tuple[str, ...] = ("quickstart",)

#: The fallback reply used when nothing else is scripted.
DEFAULT_REPLY = Reply(text="OK.")


@dataclass(frozen=True)
class Fault:
    """Inject a failure; each occurrence consumes one request and leaves the conversation's history unchanged.

    Build faults with the class methods (:meth:`http`, :meth:`context_overflow`, :meth:`abort`, :meth:`malformed`).
    """

    kind: FaultKind
    status: int | None = None
    count: int = 1
    retry_after: float | None = None
    malformed_kind: MalformedKind | None = None
    variant: ContextOverflowVariant | AbortVariant = "input"
    message: str | None = None
    reply: Reply | None = None
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"Fault count must be >= 1, got {self.count}")
        _check_delay(self.delay)
        if self.kind == "http" and (self.status is None or not 100 <= self.status <= 599):
            raise ValueError(f"Fault.http needs an HTTP status in 100..599, got {self.status!r}")
        if self.kind == "malformed" and self.malformed_kind not in _MALFORMED_KINDS:
            raise ValueError(f"unknown malformed kind {self.malformed_kind!r}; expected one of {_MALFORMED_KINDS}")
        if self.variant not in (*_OVERFLOW_VARIANTS, "running", "waiting"):
            raise ValueError(f"unknown context_overflow variant {self.variant!r}; expected one of {_OVERFLOW_VARIANTS}")

    @classmethod
    def http(
        cls,
        status: int,
        count: int = 1,
        retry_after: float | None = None,
        *,
        message: str | None = None,
        delay: float = 0.0,
    ) -> Fault:
        """Answer with an HTTP error.

        503 gets SGLang's queue-full body; 429, 408, 502, 504 and others get a plausible body in the same
        ``{"object":"error",...}`` shape (``message`` overrides its text).  ``retry_after`` sets ``Retry-After``.
        """
        return cls("http", status=status, count=count, retry_after=retry_after, message=message, delay=delay)

    @classmethod
    def context_overflow(
        cls, variant: ContextOverflowVariant = "input", count: int = 1, *, delay: float = 0.0
    ) -> Fault:
        """Answer 400 with one of SGLang's context-length messages, computed from the real prompt length.

        ``variant``: ``"input"`` (tokenizer manager: "The input (N tokens) is longer than ..."), ``"total"``
        ("Requested token count exceeds ..."), ``"scheduler"`` ("Input length (N tokens) exceeds the maximum
        allowed length ...") or ``"kv_budget"`` ("Request prompt exceeds the KV memory budget: input_len=N.", the
        scheduler's 400 for a prompt the KV pool cannot hold).
        """
        return cls("context_overflow", count=count, variant=variant, delay=delay)

    @classmethod
    def abort(
        cls,
        status_code: int | None = None,
        *,
        message: str | None = None,
        text: str | None = None,
        ids: Sequence[int] | None = None,
        count: int = 1,
        delay: float = 0.0,
        waiting: bool = False,
    ) -> Fault:
        """Abort the request like SGLang's scheduler does.

        Without ``status_code``: HTTP 200 with finish_reason ``{"type":"abort","message":"Aborted",...}`` and the
        full ``meta_info``; ``text``/``ids`` give the partial output produced before the abort (default none).
        ``status_code`` 400 becomes a 400 ``{"error":{"message":...}}``; other codes become that HTTP status with
        the ``{"object":"error",...}`` body, as SGLang turns aborts with a status into HTTP errors. ``waiting``:
        abort it as still in the waiting queue: ``{"type":"abort","message":"Abort in waiting queue"}`` and a
        ``meta_info`` without ``prompt_tokens`` or ``cached_tokens``.
        """
        partial = Reply(text=text, ids=tuple(ids) if ids is not None else None, eos=False)
        variant: AbortVariant = "waiting" if waiting else "running"
        return cls(
            "abort", status=status_code, count=count, message=message, reply=partial, delay=delay, variant=variant
        )

    @classmethod
    def weight_update(cls, status_code: int | None = None, *, count: int = 1, delay: float = 0.0) -> Fault:
        """Fail the request the way SGLang does while the trainer updates the policy's weights.

        Without ``status_code``: what a request in flight gets when weights are updated with
        ``abort_all_requests`` (``update_weights_from_*`` and ``update_weight_version``, whose default it is; also
        ``pause_generation`` with mode ``abort``): HTTP 200 with finish_reason ``{"type":"abort","message":"Aborted",
        ...}`` and no output (SGLang 0.5.23 ``tokenizer_manager.py``, ``update_weights_from_disk``:
        ``abort_request(abort_all=True)``).
        ``400``: a scheduler abort with status 400, answered as ``{"error":{"message":...}}``. Other statuses (500
        from a worker or a router in front of it) get the ``{"object":"error",...}`` body at that status.
        """
        message = None if status_code is None else "Weights are being updated; the request was aborted."
        return cls.abort(status_code, message=message, count=count, delay=delay)

    @classmethod
    def malformed(
        cls,
        kind: MalformedKind,
        *,
        text: str | None = None,
        ids: Sequence[int] | None = None,
        count: int = 1,
        delay: float = 0.0,
    ) -> Fault:
        """Answer 200 with a broken body built around a normal reply (``text``/``ids``; default ``"OK."``).

        Kinds: ``missing_output_ids``, ``logprobs_wrong_length`` (one output logprob short), ``nan_logprob`` (a
        NaN output logprob: ``null`` on SGLang, as its orjson writes it; ``-9999.0`` on vLLM's tokens endpoint; a
        400 on vLLM's ``/v1/completions``, which cannot write the reply as JSON), ``inf_logprob`` (a ``-inf`` one:
        ``null`` on SGLang, ``-9999.0`` on both vLLM endpoints),
        ``non_json``, ``truncated_body`` (full Content-Length, half the body, then the connection is closed),
        ``missing_meta_info``, ``wrong_types`` (``output_ids`` and ``completion_tokens`` as strings).

        SGLang's ``"NaN happened"`` stop needs no fault: a :class:`Reply` whose ``ids`` hold an id at or beyond the
        vocabulary size ends there, that id replaced by EOS, with a ``null`` logprob.
        """
        if text is None and ids is None:
            reply = DEFAULT_REPLY
        else:
            reply = Reply(text=text, ids=tuple(ids) if ids is not None else None)
        return cls("malformed", count=count, malformed_kind=kind, reply=reply, delay=delay)

    @property
    def retry_after_headers(self) -> dict[str, str]:
        """The ``Retry-After`` header an HTTP fault answers with, when it sets one."""
        return {"retry-after": f"{self.retry_after:g}"} if self.retry_after is not None else {}

    @property
    def label(self) -> str:
        """Short description used in records: ``http:503``, ``abort``, ``malformed:nan_logprob``, ..."""
        if self.kind == "http":
            return f"http:{self.status}"
        if self.kind == "malformed":
            return f"malformed:{self.malformed_kind}"
        if self.kind == "context_overflow":
            return f"context_overflow:{self.variant}"
        if self.variant == "waiting":
            return "abort:waiting"
        return "abort" if self.status is None else f"abort:{self.status}"


Step = Reply | Fault


@dataclass
class Script:
    """The steps for one conversation, consumed one per request.

    ``match``: the script is only given to a new conversation whose decoded first prompt contains this substring
    (None matches any conversation). ``repeat``: every new matching conversation gets its own copy of the steps (the
    script is never used up), so an agent run again gets the same answers.
    """

    turns: list[Step] = field(default_factory=list)
    match: str | None = None
    name: str | None = None
    repeat: bool = False

    def expanded(self) -> Iterator[Step]:
        """The steps with each fault repeated ``count`` times."""
        for step in self.turns:
            for _ in range(step.count):
                yield step

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Script:
        """Build a script from ``{"match": ..., "name": ..., "repeat": false, "turns": [...]}``."""
        _reject_unknown(data, {"match", "name", "repeat", "turns"}, "script")
        turns = data.get("turns", [])
        if not isinstance(turns, list):
            raise ValueError(f"script turns must be a list, got {type(turns).__name__}")
        match = data.get("match")
        name = data.get("name")
        if match is not None and not isinstance(match, str):
            raise ValueError(f"script match must be a string or null, got {match!r}")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"script name must be a string or null, got {name!r}")
        repeat = data.get("repeat", False)
        if not isinstance(repeat, bool):
            raise ValueError(f"script repeat must be true or false, got {repeat!r}")
        return cls(turns=[step_from_dict(step) for step in turns], match=match, name=name, repeat=repeat)


@dataclass
class ScriptFile:
    """Scripts plus the fallback reply (None: unscripted requests get a 400)."""

    scripts: list[Script] = field(default_factory=list)
    default: Reply | None = DEFAULT_REPLY

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptFile:
        """Build from ``{"scripts": [...], "default": {...} | null}`` (a missing default means ``"OK."``)."""
        _reject_unknown(data, {"scripts", "default"}, "script file")
        scripts = data.get("scripts", [])
        if not isinstance(scripts, list):
            raise ValueError("'scripts' must be a list")
        default: Reply | None = DEFAULT_REPLY
        if "default" in data:
            raw = data["default"]
            if raw is None:
                default = None
            else:
                step = step_from_dict(raw)
                if not isinstance(step, Reply):
                    raise ValueError("'default' must be a reply, not a fault")
                default = step
        return cls([Script.from_dict(s) for s in scripts], default)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ScriptFile:
        """Read a JSON script file, or a script shipped with the package by name (:data:`BUILTIN_SCRIPTS`)."""
        if str(path) in BUILTIN_SCRIPTS and not Path(path).exists():
            path = Path(str(importlib.resources.files("strands_tito.testing.engine") / "scripts" / f"{path}.json"))
        with Path(path).open(encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a script file must hold a JSON object")
        return cls.from_dict(data)


def _reject_unknown(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"unknown {what} key(s) {unknown}; allowed: {sorted(allowed)}")


def _opt_ids(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"ids must be a list of ints, got {value!r}")
    return tuple(value)


def step_from_dict(data: Any) -> Step:
    """Parse one step: a string, a reply object (``text``/``ids``/``eos``/``delay``/``finish``) or a fault object
    (``{"fault": "http"|"context_overflow"|"abort"|"malformed", ...}``)."""
    if isinstance(data, str):
        return Reply(text=data)
    if not isinstance(data, Mapping):
        raise ValueError(f"a step must be a string or an object, got {data!r}")
    kind = data.get("fault")
    if kind is None:
        _reject_unknown(data, {"text", "ids", "eos", "delay", "finish"}, "reply")
        return Reply(
            text=data.get("text"),
            ids=_opt_ids(data.get("ids")),
            eos=bool(data.get("eos", True)),
            delay=float(data.get("delay", 0.0)),
            finish=data.get("finish"),
        )
    common = {"fault", "count", "delay"}
    count = int(data.get("count", 1))
    delay = float(data.get("delay", 0.0))
    if kind == "http":
        _reject_unknown(data, common | {"status", "retry_after", "message"}, "http fault")
        if "status" not in data:
            raise ValueError("an http fault needs a 'status'")
        retry_after = data.get("retry_after")
        return Fault.http(
            int(data["status"]),
            count=count,
            retry_after=float(retry_after) if retry_after is not None else None,
            message=data.get("message"),
            delay=delay,
        )
    if kind == "context_overflow":
        _reject_unknown(data, common | {"variant"}, "context_overflow fault")
        return Fault.context_overflow(cast(ContextOverflowVariant, data.get("variant", "input")), count, delay=delay)
    if kind == "abort":
        _reject_unknown(data, common | {"status_code", "message", "text", "ids", "waiting"}, "abort fault")
        status_code = data.get("status_code")
        return Fault.abort(
            int(status_code) if status_code is not None else None,
            message=data.get("message"),
            text=data.get("text"),
            ids=_opt_ids(data.get("ids")),
            count=count,
            delay=delay,
            waiting=bool(data.get("waiting", False)),
        )
    if kind == "malformed":
        _reject_unknown(data, common | {"kind", "text", "ids"}, "malformed fault")
        if "kind" not in data:
            raise ValueError(f"a malformed fault needs a 'kind', one of {_MALFORMED_KINDS}")
        return Fault.malformed(
            cast(MalformedKind, data["kind"]),
            text=data.get("text"),
            ids=_opt_ids(data.get("ids")),
            count=count,
            delay=delay,
        )
    raise ValueError(f"unknown fault {kind!r}; expected http, context_overflow, abort or malformed")
