"""What every strict tool-call parser shares: the call type, reasoning removal, the stop token, tool-spec checks.

A parser reads the model's raw output text and returns the calls exactly as written. Nothing is repaired: a call
that is not well-formed becomes a :class:`ToolCall` with ``error`` set, which the model provider turns into a tool
error the model sees (reason and raw text) instead of running anything.

Checks every format gets from :meth:`ToolParser.parse`, after the format's own parsing:

* **Reasoning is never executed.** Text inside ``<think>...</think>``, text before a lone ``</think>`` (the
  generation prompt opened the block) and everything after an unclosed ``<think>`` are ignored (gpt-oss: its
  analysis channel, see :mod:`.harmony`).
* **Markup after the stop.** Servers trim the matched stop token, so it is normally absent; if the text holds one of
  the format's end-of-turn tokens, what follows it was generated after the model ended its turn. Call markup there
  becomes an error; plain text there is ignored.
* **Unknown tools.** When tool specs are given, a call to a name that is not among them is an error.
* **Unknown parameters.** A parameter the tool's schema does not list is an error only when the schema forbids
  extras (``"additionalProperties": false``). JSON Schema allows extra properties by default, and Strands' own tool
  schemas do not forbid them, so a call such a schema allows is never rejected here; the tool validates its input.
"""

from __future__ import annotations

import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from strands.types.tools import ToolSpec

__all__ = [
    "UNKNOWN_TOOL_NAME",
    "ToolCall",
    "ToolParser",
    "new_call_id",
    "parse_json_object",
    "schema_properties",
    "strict_json",
]


#: Name a malformed call is reported under when the model's text names no tool that can be read.
UNKNOWN_TOOL_NAME = "unknown_tool"


@dataclass(frozen=True)
class ToolCall:
    """One tool call found in model output.

    Also exported as ``ToolParseResult`` (strands-sglang 0.6.2's name); :attr:`payload` is that type's accessor.

    Attributes:
        id: Tool-use id given to Strands (unique per call). The model's own id where the format carries one
            (Kimi-K2's ``functions.NAME:IDX``), else a generated one.
        name: Tool name as written by the model, or ``""`` if it could not be read.
        input: Arguments (empty when ``error`` is set).
        raw: The call's raw text, markup included.
        error: Why the call is malformed; None for a valid call.
    """

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None

    @property
    def is_error(self) -> bool:
        """True when the call is malformed and must not run."""
        return self.error is not None

    @property
    def payload(self) -> str:
        """The arguments as JSON text for a valid call, the raw call text for a malformed one (0.6.2's accessor)."""
        return self.raw if self.error is not None else json.dumps(self.input)


def new_call_id(index: int) -> str:
    """A unique tool-use id; the index suffix records the call's position in its message."""
    return f"call_{secrets.token_hex(4)}_{index}"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # json.loads would keep the last value silently: that is a different call than the one written.
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: json.loads with hooks builds a decoder and its scanner on every call.
_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def strict_json(text: str) -> Any:
    """Decode JSON strictly: duplicate keys (at any depth) and ``NaN``/``Infinity`` are errors.

    Raises:
        ValueError: The text is not strict JSON (``json.JSONDecodeError`` is a subclass).
    """
    return _STRICT_DECODER.decode(text)


def parse_json_object(text: str, what: str) -> dict[str, Any] | str:
    """``text`` decoded as a strict JSON object, or the reason it is not one (a ``str``)."""
    try:
        value = strict_json(text)
    except ValueError as e:
        return f"{what} is not valid JSON: {e}"
    if not isinstance(value, dict):
        return f"{what} must be a JSON object, got {type(value).__name__}"
    return value


def schema_properties(spec: ToolSpec | None) -> dict[str, Any]:
    """The ``properties`` of a tool spec's input schema (``{}`` when unknown)."""
    schema = _input_schema(spec)
    properties = schema.get("properties", {})
    return properties if isinstance(properties, dict) else {}


def _input_schema(spec: ToolSpec | None) -> dict[str, Any]:
    if spec is None:
        return {}
    schema: Any = spec.get("inputSchema", {})
    if isinstance(schema, dict) and "json" in schema:
        schema = schema["json"]
    return schema if isinstance(schema, dict) else {}


class ToolParser(ABC):
    """Base class: stop-token split, reasoning removal, a format-specific :meth:`parse_calls`, then spec checks.

    Args:
        think_start: Token that opens a reasoning block.
        think_end: Token that closes it.
        think_start_token: strands-sglang 0.6.2's name for ``think_start`` (given, it wins).
        think_end_token: strands-sglang 0.6.2's name for ``think_end``.

    ``think_pattern`` (0.6.2's attribute) matches one whole reasoning block.
    """

    #: Registry name (``get_tool_parser(name)``).
    name: ClassVar[str]
    #: End-of-turn tokens of the format's models; text after one of them was generated past the stop.
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    #: Finds this format's call markup in any text: markup after the stop, and the foreign-format warning.
    markup: ClassVar[re.Pattern[str]]

    def __init__(
        self,
        think_start: str = "<think>",
        think_end: str = "</think>",
        *,
        think_start_token: str | None = None,
        think_end_token: str | None = None,
    ) -> None:
        self.think_start = self.think_start_token = think_start if think_start_token is None else think_start_token
        self.think_end = self.think_end_token = think_end if think_end_token is None else think_end_token
        self.think_pattern = re.compile(re.escape(self.think_start) + ".*?" + re.escape(self.think_end), re.DOTALL)
        # Foreign formats already warned about for this parser (see
        # strands_tito.providers.tool_parsers.warn_foreign_markup).
        self.warned_formats: set[str] = set()

    def visible_text(self, text: str) -> str:
        """The part of ``text`` that may contain executable calls (reasoning removed)."""
        text = self.think_pattern.sub("", text)
        if self.think_end in text:
            text = text.rsplit(self.think_end, 1)[1]
        if self.think_start in text:
            text = text.split(self.think_start, 1)[0]
        return text

    def split_at_stop(self, text: str) -> tuple[str, str, str]:
        """``(before, stop token, after)`` at the first end-of-turn token; ``(text, "", "")`` without one."""
        found = [(i, token) for token in self.stop_tokens if (i := text.find(token)) != -1]
        if not found:
            return text, "", ""
        index, token = min(found)
        return text[:index], token, text[index + len(token) :]

    def parse(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        """Return every call in ``text`` outside reasoning, in the order written."""
        head, stop, tail = self.split_at_stop(text)
        calls = [self.check_call(call, tool_specs) for call in self.parse_calls(self.visible_text(head), tool_specs)]
        if stop and self.markup.search(tail):
            reason = f"tool call markup after the end-of-turn token {stop!r}: the turn had already ended"
            calls.append(ToolCall(id=new_call_id(len(calls)), name="", raw=tail, error=reason))
        return calls

    @abstractmethod
    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        """Parse calls from text that contains no reasoning and nothing past the stop token."""

    def check_call(self, call: ToolCall, tool_specs: Sequence[ToolSpec] | None) -> ToolCall:
        """``call``, or an error in its place when the specs rule it out (unknown tool, forbidden parameters)."""
        if call.error is not None or not tool_specs:
            return call
        specs = {spec["name"]: spec for spec in tool_specs}
        spec = specs.get(call.name)
        if spec is None:
            return _as_error(call, f"unknown tool {call.name!r}; the tools are {sorted(specs)}")
        schema = _input_schema(spec)
        if schema.get("additionalProperties") is False:
            unknown = sorted(set(call.input) - set(schema_properties(spec)))
            if unknown:
                return _as_error(call, f"unknown parameters {unknown} for tool {call.name!r}")
        return call

    def error(self, index: int, reason: str, raw: str, name: str = "") -> ToolCall:
        """A malformed call at position ``index``."""
        return ToolCall(id=new_call_id(index), name=name, raw=raw, error=reason)


def _as_error(call: ToolCall, reason: str) -> ToolCall:
    # A fresh id: an id the model wrote (Kimi-K2) names a call that is not going to run.
    call_id = new_call_id(0) if call.id.startswith("functions.") else call.id
    return ToolCall(id=call_id, name=call.name, raw=call.raw, error=reason)


class TaggedCallParser(ToolParser):
    """Shared scanning for formats that wrap each call in its own start/end tags (``<tool_call>...</tool_call>``).

    Args:
        tool_start_token: Tag that opens a call, for a model trained with other tags (default: the format's).
        tool_end_token: Tag that closes a call.
        kwargs: See :class:`ToolParser`.

    ``tool_pattern`` (strands-sglang 0.6.2's attribute) captures the body of one call between the tags, trimmed.
    """

    call_start: str = "<tool_call>"
    call_end: str = "</tool_call>"

    def __init__(self, tool_start_token: str | None = None, tool_end_token: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if tool_start_token is not None:
            self.call_start = tool_start_token
        if tool_end_token is not None:
            self.call_end = tool_end_token
        self.tool_start_token, self.tool_end_token = self.call_start, self.call_end
        self.tool_pattern = re.compile(rf"{re.escape(self.call_start)}\s*(.*?)\s*{re.escape(self.call_end)}", re.DOTALL)

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        specs = {spec["name"]: spec for spec in tool_specs or []}
        calls: list[ToolCall] = []
        pos = 0
        while True:
            start = text.find(self.call_start, pos)
            stray_end = text.find(self.call_end, pos)
            if stray_end != -1 and (start == -1 or stray_end < start):
                calls.append(self.error(len(calls), f"{self.call_end} without a matching {self.call_start}", ""))
                pos = stray_end + len(self.call_end)
                continue
            if start == -1:
                return calls
            body_start = start + len(self.call_start)
            end = text.find(self.call_end, body_start)
            nested = text.find(self.call_start, body_start)
            if end == -1 or (nested != -1 and nested < end):
                stop = len(text) if nested == -1 else nested
                calls.append(self.error(len(calls), f"{self.call_start} is not closed", text[start:stop]))
                if nested == -1:
                    return calls
                pos = nested
                continue
            raw = text[start : end + len(self.call_end)]
            calls.append(self.parse_body(len(calls), text[body_start:end], raw, specs))
            pos = end + len(self.call_end)

    @abstractmethod
    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        """Parse the text between the call tags."""


class SectionParser(ToolParser):
    """Shared scanning for formats with a section of calls: ``SECTION_START (CALL_START ... CALL_END)+ SECTION_END``.

    Only whitespace may stand between the calls of a section; calls and call markup outside a section are errors.
    """

    section_start: ClassVar[str]
    section_end: ClassVar[str]
    call_start: ClassVar[str]
    call_end: ClassVar[str]

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        specs = {spec["name"]: spec for spec in tool_specs or []}
        calls: list[ToolCall] = []
        pos = 0
        while True:
            start = text.find(self.section_start, pos)
            outside = text[pos : len(text) if start == -1 else start]
            for marker in (self.section_end, self.call_start, self.call_end):
                if marker in outside:
                    calls.append(self.error(len(calls), f"{marker} outside a {self.section_start} section", outside))
                    break
            if start == -1:
                return calls
            body_start = start + len(self.section_start)
            end = text.find(self.section_end, body_start)
            nested = text.find(self.section_start, body_start)
            if end == -1 or (nested != -1 and nested < end):
                stop = len(text) if nested == -1 else nested
                calls.append(self.error(len(calls), f"{self.section_start} is not closed", text[start:stop]))
                if nested == -1:
                    return calls
                pos = nested
                continue
            self._parse_section(text[body_start:end], specs, calls)
            pos = end + len(self.section_end)

    def _parse_section(self, body: str, specs: dict[str, ToolSpec], calls: list[ToolCall]) -> None:
        pos = 0
        while pos < len(body):
            start = body.find(self.call_start, pos)
            between = body[pos : len(body) if start == -1 else start]
            if between.strip():
                calls.append(
                    self.error(len(calls), f"unexpected text between calls: {between.strip()[:80]!r}", between)
                )
            if start == -1:
                return
            body_start = start + len(self.call_start)
            end = body.find(self.call_end, body_start)
            nested = body.find(self.call_start, body_start)
            if end == -1 or (nested != -1 and nested < end):
                stop = len(body) if nested == -1 else nested
                calls.append(self.error(len(calls), f"{self.call_start} is not closed", body[start:stop]))
                pos = stop
                continue
            raw = body[start : end + len(self.call_end)]
            calls.append(self.parse_body(len(calls), body[body_start:end], raw, specs))
            pos = end + len(self.call_end)

    @abstractmethod
    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        """Parse the text between one call's start and end tokens."""
