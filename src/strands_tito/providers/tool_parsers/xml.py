"""XML-style formats whose parameter values are raw text typed by the tool's JSON schema.

* ``qwen_xml`` (Qwen3-Coder, Qwen3.5/3.6): ``<tool_call>\\n<function=N>\\n<parameter=P>\\nV\\n</parameter>\\n...
  </function>\\n</tool_call>``
* ``glm`` (GLM-4.5/4.6/4.7): ``<tool_call>N\\n<arg_key>P</arg_key>\\n<arg_value>V</arg_value>\\n...</tool_call>``
  (GLM-4.7 renders the same without the newlines)
* ``minimax_m2`` (MiniMax-M2): ``<minimax:tool_call>\\n<invoke name="N">\\n<parameter name="P">V</parameter>\\n...
  </invoke>\\n</minimax:tool_call>``

Typing: the templates write a string value as it is and any other value as JSON (Qwen's template writes a scalar
with Jinja's ``string`` filter, so a boolean reads ``True``/``False``). So a value is kept as text when the schema
says ``"type": "string"``; otherwise it is decoded as strict JSON, and kept as text when it is not JSON (the tool's
input validation then reports the type). Without a schema, text that happens to be JSON (``42``, ``true``) is
decoded: the format cannot tell the string ``"42"`` from the number.

Strictness: only whitespace may stand between elements; an element that is not closed before the next one opens
(``<parameter=a>1<parameter=b>2</parameter>``) is an error, never a value that swallows the next parameter; a
parameter given twice is an error. A value therefore cannot contain the format's own closing or opening tags.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import (
    SectionParser,
    TaggedCallParser,
    ToolCall,
    new_call_id,
    schema_properties,
    strict_json,
)

__all__ = ["GLMToolParser", "MiniMaxM2ToolParser", "QwenXMLToolParser", "typed_value"]


def typed_value(text: str, schema: Any, *, python_booleans: bool = False) -> Any:
    """A parameter's raw text typed by its JSON schema (see the module docstring).

    Args:
        python_booleans: Read ``True``/``False`` as booleans for a ``boolean`` parameter (Qwen's template renders
            them with Jinja's ``string`` filter, i.e. Python's spelling).
    """
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string":
        return text
    if python_booleans and kind == "boolean" and text in ("True", "False"):
        return text == "True"
    try:
        return strict_json(text)
    except ValueError:
        return text


class _ElementScanner:
    """Reads ``OPEN name CLOSE_NAME value CLOSE`` elements separated only by whitespace from one call's body."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.pos = 0

    def skip_space(self) -> None:
        while self.pos < len(self.body) and self.body[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.body)

    def expect(self, token: str) -> bool:
        """Consume ``token`` after optional whitespace; False (nothing consumed) when it is not next."""
        self.skip_space()
        if self.body.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def until(self, close: str, forbidden: tuple[str, ...]) -> str | None:
        """The text up to ``close`` (consumed), or None when ``close`` is missing or a forbidden tag comes first."""
        end = self.body.find(close, self.pos)
        if end == -1:
            return None
        text = self.body[self.pos : end]
        if any(tag in text for tag in forbidden):
            return None
        self.pos = end + len(close)
        return text

    def rest(self) -> str:
        return self.body[self.pos :].strip()[:80]


class QwenXMLToolParser(TaggedCallParser):
    """``<tool_call><function=NAME><parameter=P>V</parameter>...</function></tool_call>`` (Qwen3-Coder, Qwen3.5).

    The template puts each value on its own line; exactly one newline after ``<parameter=P>`` and one before
    ``</parameter>`` are markup and removed, the rest is the value.
    """

    name = "qwen_xml"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|im_end|>", "<|endoftext|>")
    markup: ClassVar[re.Pattern[str]] = re.compile(r"<tool_call>\s*<function=|<function=[^>\n]+>\s*<parameter=")
    #: The template writes a newline after ``<parameter=P>`` and before ``</parameter>`` (Seed-OSS writes none).
    value_newlines: ClassVar[bool] = True

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        scan = _ElementScanner(body)
        if not scan.expect("<function="):
            return self.error(index, "expected exactly one <function=NAME>...</function> inside <tool_call>", raw)
        name = scan.until(">", ("\n", "<"))
        if name is None or not name.strip():
            return self.error(index, "<function=NAME> has no name", raw)
        name = name.strip()
        close = body.rfind("</function>")
        if close == -1 or body[close + len("</function>") :].strip():
            return self.error(index, "<function=NAME> is not closed by </function> at the end of the call", raw, name)
        inner = _ElementScanner(body[scan.pos : close])
        if "<function=" in inner.body or "</function>" in inner.body:
            return self.error(index, "expected exactly one <function=NAME>...</function> inside <tool_call>", raw, name)
        properties = schema_properties(specs.get(name))
        arguments: dict[str, Any] = {}
        while not inner.at_end():
            if not inner.expect("<parameter="):
                return self.error(index, f"unexpected text in function body: {inner.rest()!r}", raw, name)
            key = inner.until(">", ("\n", "<"))
            if key is None or not key.strip():
                return self.error(index, "<parameter=NAME> has no name", raw, name)
            key = key.strip()
            value = inner.until("</parameter>", ("<parameter=",))
            if value is None:
                return self.error(index, f"<parameter={key}> is not closed by </parameter>", raw, name)
            if key in arguments:
                return self.error(index, f"parameter {key!r} given twice", raw, name)
            # The template's own newlines around the value are markup, not data.
            text = value.removeprefix("\n").removesuffix("\n") if self.value_newlines else value
            arguments[key] = typed_value(text, properties.get(key), python_booleans=True)
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)


class GLMToolParser(TaggedCallParser):
    """``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`` (GLM-4.5/4.6/4.7).

    Whitespace between elements is optional (GLM-4.6's template writes newlines, GLM-4.7's none); the name is the
    text before the first ``<arg_key>`` with surrounding whitespace removed, and may not contain whitespace.
    Keys and values are taken exactly as written between their tags.
    """

    name = "glm"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|observation|>", "<|user|>", "<|endoftext|>")
    markup: ClassVar[re.Pattern[str]] = re.compile(r"<arg_key>|<tool_call>[^\s<>{]+\s*</tool_call>")

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        first_tag = body.find("<")
        name = (body if first_tag == -1 else body[:first_tag]).strip()
        if not name:
            return self.error(index, "tool call has no name before its first <arg_key>", raw)
        if any(c.isspace() for c in name):
            return self.error(index, f"tool name {name[:80]!r} contains whitespace", raw)
        scan = _ElementScanner(body[0 if first_tag == -1 else first_tag :])
        if first_tag == -1:
            scan.pos = len(scan.body)
        properties = schema_properties(specs.get(name))
        arguments: dict[str, Any] = {}
        tags = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")
        while not scan.at_end():
            if not scan.expect("<arg_key>"):
                return self.error(index, f"unexpected text in tool call: {scan.rest()!r}", raw, name)
            key = scan.until("</arg_key>", tags)
            if key is None:
                return self.error(index, "<arg_key> is not closed by </arg_key>", raw, name)
            if not scan.expect("<arg_value>"):
                return self.error(index, f"<arg_key>{key}</arg_key> is not followed by <arg_value>", raw, name)
            value = scan.until("</arg_value>", tags)
            if value is None:
                return self.error(index, f"<arg_value> of {key!r} is not closed by </arg_value>", raw, name)
            if key in arguments:
                return self.error(index, f"parameter {key!r} given twice", raw, name)
            arguments[key] = typed_value(value, properties.get(key))
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)


_INVOKE_NAME = re.compile(r' name="([^"<>\n]*)">')


class MiniMaxM2ToolParser(SectionParser):
    """``<minimax:tool_call><invoke name="N"><parameter name="P">V</parameter>...</invoke>...</minimax:tool_call>``.

    One section holds the turn's calls (one ``<invoke>`` each); values are taken exactly as written.
    """

    name = "minimax_m2"
    stop_tokens: ClassVar[tuple[str, ...]] = ("[e~[",)
    markup: ClassVar[re.Pattern[str]] = re.compile(r'<minimax:tool_call>|<invoke name="')
    section_start = "<minimax:tool_call>"
    section_end = "</minimax:tool_call>"
    call_start = "<invoke"
    call_end = "</invoke>"

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        match = _INVOKE_NAME.match(body)
        if match is None or not match.group(1):
            return self.error(index, '<invoke> must start as <invoke name="NAME">', raw)
        name = match.group(1)
        scan = _ElementScanner(body[match.end() :])
        properties = schema_properties(specs.get(name))
        arguments: dict[str, Any] = {}
        while not scan.at_end():
            if not scan.expect('<parameter name="'):
                return self.error(index, f"unexpected text in <invoke>: {scan.rest()!r}", raw, name)
            key = scan.until('">', ("\n", "<", '"'))
            if not key:
                return self.error(index, '<parameter name="NAME"> has no name', raw, name)
            value = scan.until("</parameter>", ("<parameter name=",))
            if value is None:
                return self.error(index, f'<parameter name="{key}"> is not closed by </parameter>', raw, name)
            if key in arguments:
                return self.error(index, f"parameter {key!r} given twice", raw, name)
            arguments[key] = typed_value(value, properties.get(key))
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)
