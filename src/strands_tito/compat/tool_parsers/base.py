"""``strands_sglang.tool_parsers.base``: 0.6.2's parser base class, result type and registry.

A parser written for strands-sglang 0.6.2 runs unchanged: subclass :class:`ToolParser`, implement ``parse(text)``
(it may use ``self.tool_pattern`` and ``self.think_pattern``; removing reasoning is its job, as in 0.6.2), return
:class:`ToolParseResult` objects (``ToolParseResult.from_parse_error(...)`` for a call it cannot read), and register
it with ``@register_tool_parser("name")``. ``SGLangModel(tool_parser=MyParser())`` or ``get_tool_parser("name")``
then use it. Its calls get the checks every strands-tito parser gets afterwards (a call to a tool the agent does not
have is an error the model sees), and a malformed call is never run: the model gets a tool error with its raw text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers import TOOL_PARSERS, UNKNOWN_TOOL_NAME, get_tool_parser, register_tool_parser
from strands_tito.providers.tool_parsers.base import ToolCall
from strands_tito.providers.tool_parsers.base import ToolParser as _ToolParser

__all__ = ["TOOL_PARSER_REGISTRY", "ToolParseResult", "ToolParser", "get_tool_parser", "register_tool_parser"]

#: 0.6.2's name for the registry: the same dict as ``strands_tito.providers.tool_parsers.TOOL_PARSERS``.
TOOL_PARSER_REGISTRY = TOOL_PARSERS


@dataclass(frozen=True)
class ToolParseResult(ToolCall):
    """A call as 0.6.2 described it: ``raw`` is None on success and the unparsable text on error."""

    UNKNOWN_NAME: ClassVar[str] = UNKNOWN_TOOL_NAME

    raw: str | None = None  # type: ignore[assignment]

    @classmethod
    def from_parse_error(cls, id: str, raw: str, name: str | None = None) -> ToolParseResult:
        """A call that could not be parsed, under ``name`` when the model's text names its tool."""
        return cls(id=id, name=name if name is not None else cls.UNKNOWN_NAME, raw=raw, error="malformed tool call")

    @property
    def is_error(self) -> bool:
        """True when the call is malformed (``raw`` set, as in 0.6.2, or ``error`` set)."""
        return self.error is not None or self.raw is not None


class ToolParser(_ToolParser):
    """0.6.2's base class for custom parsers: implement ``parse(self, text) -> list[ToolParseResult]``.

    Args:
        tool_start_token: Tag that opens a call (``tool_pattern`` captures what stands between the two tags).
        tool_end_token: Tag that closes a call.
        think_start_token: Tag that opens a reasoning block (``think_pattern`` matches a whole block).
        think_end_token: Tag that closes it.
    """

    DEFAULT_TOOL_START_TOKEN: ClassVar[str] = "<tool_call>"
    DEFAULT_TOOL_END_TOKEN: ClassVar[str] = "</tool_call>"
    DEFAULT_THINK_START_TOKEN: ClassVar[str] = "<think>"
    DEFAULT_THINK_END_TOKEN: ClassVar[str] = "</think>"
    name: ClassVar[str] = "custom"
    #: A custom format is never reported as another parser's markup in the text.
    markup: ClassVar[re.Pattern[str]] = re.compile(r"(?!)")

    def __init__(
        self,
        tool_start_token: str = DEFAULT_TOOL_START_TOKEN,
        tool_end_token: str = DEFAULT_TOOL_END_TOKEN,
        think_start_token: str = DEFAULT_THINK_START_TOKEN,
        think_end_token: str = DEFAULT_THINK_END_TOKEN,
    ) -> None:
        super().__init__(think_start=think_start_token, think_end=think_end_token)
        self.tool_start_token = tool_start_token
        self.tool_end_token = tool_end_token
        self.think_start_token = think_start_token
        self.think_end_token = think_end_token
        self.tool_pattern = re.compile(
            rf"{re.escape(tool_start_token)}\s*(.*?)\s*{re.escape(tool_end_token)}", re.DOTALL
        )
        self.think_pattern = re.compile(rf"{re.escape(think_start_token)}.*?{re.escape(think_end_token)}", re.DOTALL)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        parse = cls.__dict__.get("parse")
        if parse is not None:
            cls.parse = _checked(parse)  # type: ignore[method-assign]

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        """Not used: a 0.6.2-style parser implements :meth:`parse`."""
        raise NotImplementedError(f"{type(self).__name__} must implement parse(text)")


# strands-tito's own parsers count as 0.6.2 ToolParsers for isinstance checks.
for _parser in list(TOOL_PARSERS.values()):
    ToolParser.register(_parser)


def _checked(parse: Callable[[Any, str], list[ToolCall]]) -> Callable[..., list[ToolCall]]:
    """A 0.6.2 ``parse(text)`` as a strands-tito ``parse(text, tool_specs)``: 0.6.2 errors marked, specs checked."""

    @functools.wraps(parse)
    def checked(self: ToolParser, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        calls = []
        for call in parse(self, text):
            if call.error is None and isinstance(call, ToolParseResult) and call.raw is not None:
                call = replace(call, error="malformed tool call")
            calls.append(self.check_call(call, tool_specs))
        return calls

    return checked
