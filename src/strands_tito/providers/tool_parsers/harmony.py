"""gpt-oss (harmony): ``<|start|>assistant to=functions.N<|channel|>commentary json<|message|>{json}<|call|>``.

The generation prompt ends ``<|start|>assistant``, so the output continues the first message's header, e.g.
``<|channel|>analysis<|message|>...<|end|><|start|>assistant to=functions.N<|channel|>commentary json<|message|>
{...}`` (the server trims the ``<|call|>`` stop token). The output is a sequence of messages, each
``HEADER<|message|>CONTENT`` ended by ``<|end|>`` (more messages follow), ``<|call|>`` or ``<|return|>`` (the turn
ends), or the end of the text.

* **analysis** messages are reasoning: never executed, whatever they contain. One that is not closed by ``<|end|>``
  runs to the end of the output (reasoning never closed), so nothing after it is executed either.
* A **call** is a message whose recipient is ``functions.NAME``, on the ``commentary`` channel, with content type
  ``json`` (written ``json`` as the template does, or ``<|constrain|>json``) or none; the recipient may stand in the
  role part (``assistant to=...<|channel|>commentary``, the template's spelling) or after the channel (harmony's
  other spelling). Its content must be one strict JSON object, and it must be the output's last message (``<|call|>``
  is a stop token): a call closed by ``<|end|>`` or followed by another message is an error (merged calls). A call
  on the ``final`` channel, to a recipient outside ``functions.``, or with another content type is an error.
* **final** and plain commentary messages are answers and preambles, not calls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import ToolCall, ToolParser, new_call_id, parse_json_object

__all__ = ["GptOssToolParser"]

_START = "<|start|>"
_MESSAGE = "<|message|>"
_END = "<|end|>"
_CHANNEL = "<|channel|>"
_CONSTRAIN = "<|constrain|>"
_HEADER = re.compile(
    r"(?:assistant)?(?: to=(?P<recipient>[^\s<]+))?<\|channel\|>(?P<channel>[a-z]+)"
    r"(?P<rest>[^<]*(?:<\|constrain\|>[^<]*)?)"
)


class GptOssToolParser(ToolParser):
    """Harmony messages of gpt-oss; see the module docstring for what is a call."""

    name = "gpt_oss"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|call|>", "<|return|>")
    markup: ClassVar[re.Pattern[str]] = re.compile(r"to=functions\.[^\s<]+\s*<\|channel\|>|<\|channel\|>commentary to=")

    def visible_text(self, text: str) -> str:
        # Reasoning is the analysis channel, handled message by message in parse_calls.
        return text

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        calls: list[ToolCall] = []
        segments = text.split(_START)
        for position, segment in enumerate(segments):
            last = position == len(segments) - 1
            if position > 0 and not segment.startswith("assistant"):
                if "to=functions." in segment:
                    calls.append(self.error(len(calls), "a call must be an assistant message", _START + segment))
                continue
            raw = segment if position == 0 else _START + segment
            header, has_message, body = segment.partition(_MESSAGE)
            match = _HEADER.fullmatch(header)
            if not has_message or match is None:
                if "to=functions." in header or ("to=functions." in segment and not has_message):
                    reason = "call header is not closed by <|message|>" if not has_message else "malformed header"
                    calls.append(self.error(len(calls), reason, raw))
                continue
            content, closed, after = body.partition(_END)
            if closed and "to=functions." in after and after.strip():
                calls.append(self.error(len(calls), "call header after <|end|> without <|start|>assistant", after))
            channel = match.group("channel")
            if channel == "analysis":
                if not closed:
                    return calls  # reasoning never closed: nothing after it is executed
                continue
            recipient, content_type, problem = _recipient_and_type(match.group("recipient"), match.group("rest"))
            if recipient is None and problem is None:
                continue  # final answer or commentary preamble
            name = recipient.removeprefix("functions.") if recipient else ""
            problem = problem or _call_problem(channel, recipient, content_type, closed=bool(closed), last=last)
            if problem is not None:
                calls.append(self.error(len(calls), problem, raw, name))
                continue
            payload = parse_json_object(content, "arguments")
            if isinstance(payload, str):
                calls.append(self.error(len(calls), payload, raw, name))
            else:
                calls.append(ToolCall(id=new_call_id(len(calls)), name=name, input=payload, raw=raw))
        return calls


def _call_problem(
    channel: str, recipient: str | None, content_type: str | None, *, closed: bool, last: bool
) -> str | None:
    """Why a message addressed to a recipient is not a valid call, or None."""
    if channel != "commentary":
        return f"a call must be on the commentary channel, not {channel!r}"
    if recipient is None or not recipient.startswith("functions.") or recipient == "functions.":
        return f"recipient {recipient!r} is not functions.NAME (built-in tools are not supported)"
    if content_type not in (None, "json"):
        return f"call content type must be json, got {content_type!r}"
    if closed:
        return "a call must end the turn with <|call|>, not <|end|>"
    if not last:
        return "a call must be the last message of the turn (several calls merged)"
    return None


def _recipient_and_type(recipient: str | None, rest: str) -> tuple[str | None, str | None, str | None]:
    """``(recipient, content type, problem)`` from the header's role part and what follows the channel name."""
    content_type: str | None = None
    for word in rest.replace(_CONSTRAIN, " " + _CONSTRAIN).split():
        if word.startswith("to="):
            if recipient is not None:
                return recipient, None, "call header names two recipients"
            recipient = word[3:]
        elif content_type is None:
            content_type = word.removeprefix(_CONSTRAIN)
        else:
            return recipient, content_type, f"unexpected header text {rest.strip()[:80]!r}"
    return recipient, content_type, None
