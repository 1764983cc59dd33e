"""Strands messages and tool specs as the chat-template messages and tools that Hugging Face templates render.

Tool results become ``tool`` messages (with call id and tool name), images become content parts, and a call's
arguments are a mapping or JSON text, as the template takes them (``PromptEncoder.json_arguments`` in
:mod:`strands_tito.providers.prompt`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from strands.types.content import Message, Messages
from strands.types.tools import ToolSpec

from strands_tito.errors import StrandsTitoError

__all__ = [
    "IMAGE_MIME",
    "MessageFormatter",
    "PromptError",
    "call_arguments",
    "format_messages",
    "format_tool_specs",
    "image_data_url",
    "message_formatter",
    "tool_calls_of",
    "tools_system_text",
    "with_history_calls",
]

#: Strands image formats and their MIME types.
IMAGE_MIME: Final[dict[str, str]] = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "jpg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}


class PromptError(StrandsTitoError, ValueError):
    """The conversation or chat template cannot be tokenized incrementally."""


#: ``(messages, system_prompt, images)`` -> the chat template's messages, as :func:`format_messages` does; ``images``
#: (when given) collects the images' data URLs in prompt order.
MessageFormatter = Callable[[Messages, str | None, list[str] | None], list[dict[str, Any]]]


def image_data_url(block: Any) -> str:
    """A Strands image content block (``{"format": "png", "source": {"bytes": ...}}``) as a base64 data URL."""
    fmt = str(block.get("format", "")).lower()
    mime = IMAGE_MIME.get(fmt)
    if mime is None:
        raise PromptError(f"image format {fmt!r} is not one of {sorted(IMAGE_MIME)}")
    data = (block.get("source") or {}).get("bytes")
    if not isinstance(data, bytes | bytearray) or not data:
        raise PromptError("an image content block needs its bytes in source.bytes (locations are not fetched)")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _text_of(blocks: Sequence[Any]) -> str:
    parts: list[str] = []
    for block in blocks:
        if "text" in block:
            parts.append(block["text"])
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False))
        elif "image" in block:
            raise PromptError("image content is only supported in user messages and tool results of SGLangModel")
        elif "document" in block or "video" in block:
            raise PromptError("document and video content is not supported by strands-tito yet")
    return "".join(parts)


def _content_of(blocks: Sequence[Any], images: list[str] | None) -> str | list[dict[str, Any]]:
    """Message content: text, or (with images, when ``images`` collects them) content parts in block order.

    Each image becomes one ``{"type": "image"}`` part, which vision-language templates render as their placeholder;
    its data URL is appended to ``images``, so the list follows prompt order.
    """
    if images is None or not any("image" in block for block in blocks):
        return _text_of(blocks)
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if "image" in block:
            images.append(image_data_url(block["image"]))
            parts.append({"type": "image"})
            continue
        text = _text_of([block])
        if not text:
            continue
        if parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += text  # adjacent text blocks render as one, as without images
        else:
            parts.append({"type": "text", "text": text})
    return parts


def format_tool_specs(tool_specs: Sequence[ToolSpec] | None) -> list[dict[str, Any]] | None:
    """Strands tool specs in the OpenAI function form chat templates expect."""
    if not tool_specs:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description", ""),
                "parameters": spec["inputSchema"].get("json", spec["inputSchema"]),
            },
        }
        for spec in tool_specs
    ]


def format_messages(
    messages: Messages, system_prompt: str | None = None, images: list[str] | None = None
) -> list[dict[str, Any]]:
    """Strands messages as chat-template messages.

    With ``images`` given, image blocks of user messages and tool results become ``{"type": "image"}`` content parts
    and their data URLs are appended to ``images`` in prompt order; without it an image raises :class:`PromptError`.

    Tool results become one ``tool`` message each (with the call id and the tool's name, which some templates render
    in the result header), in the order the calls were made in the preceding assistant message (Strands collects
    them in completion order). Assistant text is kept verbatim: it is the model's raw
    output, tool-call markup included, so ``toolUse`` blocks are not rendered a second time.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    call_order: dict[str, int] = {}
    call_names: dict[str, str] = {}
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant":
            uses = [b["toolUse"] for b in content if "toolUse" in b]
            call_order = {use["toolUseId"]: i for i, use in enumerate(uses)}
            call_names = {use["toolUseId"]: use["name"] for use in uses}
            entry: dict[str, Any] = {"role": "assistant", "content": _text_of(content)}
            reasoning = "".join(
                b["reasoningContent"].get("reasoningText", {}).get("text", "")
                for b in content
                if "reasoningContent" in b
            )
            if reasoning:
                entry["reasoning_content"] = reasoning
            out.append(entry)
            continue
        results = [block["toolResult"] for block in content if "toolResult" in block]
        results.sort(key=lambda r: call_order.get(r["toolUseId"], len(call_order)))
        out.extend(
            {
                "role": "tool",
                "tool_call_id": r["toolUseId"],
                "name": call_names.get(r["toolUseId"], ""),
                "content": _content_of(r["content"], images),
            }
            for r in results
        )
        text = _content_of([b for b in content if "toolResult" not in b], images)
        if text or not results:
            out.append({"role": "user", "content": text})
    return out


def tool_calls_of(message: Message, *, json_text: bool = False) -> list[dict[str, Any]]:
    """The ``toolUse`` blocks of a Strands assistant message as chat-template ``tool_calls`` (ids kept).

    Arguments are a mapping, or with ``json_text`` JSON text (the OpenAI convention), as the template expects
    (:attr:`PromptEncoder.json_arguments`).
    """
    return [
        {
            "id": use["toolUseId"],
            "type": "function",
            "function": {"name": use["name"], "arguments": call_arguments(use["input"], json_text)},
        }
        for use in (block["toolUse"] for block in message["content"] if "toolUse" in block)
    ]


def call_arguments(arguments: Any, json_text: bool) -> Any:
    """A call's arguments as the template takes them: the mapping, or with ``json_text`` its JSON text."""
    return json.dumps(arguments, ensure_ascii=False) if json_text else arguments


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """The tool schemas as system-prompt text, for templates that render no tools list (DeepSeek-V3.1).

    One JSON schema per line inside ``<tools></tools>``; the model's own call syntax is left to its training.
    """
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return f"## Tools\n\nYou can call the following tools, given as JSON schemas:\n<tools>\n{lines}\n</tools>"


def with_history_calls(
    formatted: list[dict[str, Any]], messages: Messages, *, force: bool, json_text: bool
) -> list[dict[str, Any]]:
    """Earlier assistant turns of a first prompt with their ``toolUse`` blocks as structured ``tool_calls`` (ids kept).

    An assistant text is the model's raw output, call markup included, so it is rendered verbatim; only a turn whose
    text names none of its tools (a restored conversation or few-shot history written without the markup) gets its
    calls structured, or every turn with calls when ``force`` (templates that refuse a tool message without them).
    """
    assistants = iter(m for m in messages if m["role"] == "assistant")
    out: list[dict[str, Any]] = []
    for entry in formatted:
        if entry["role"] != "assistant":
            out.append(entry)
            continue
        calls = tool_calls_of(next(assistants), json_text=json_text)
        text = entry["content"] if isinstance(entry["content"], str) else ""
        if calls and (force or not any(c["function"]["name"] in text for c in calls)):
            entry = {**entry, "tool_calls": calls}
        out.append(entry)
    return out


def message_formatter(
    format_override: Callable[[Messages, str | None], list[dict[str, Any]]] | None,
) -> MessageFormatter:
    """:func:`format_messages`, or an override called with strands-sglang 0.6's arguments (messages, system prompt):
    its images are its own business, none are collected."""
    if format_override is None:
        return format_messages
    return lambda messages, system_prompt, images: format_override(messages, system_prompt)
