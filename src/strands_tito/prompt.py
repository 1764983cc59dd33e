"""Prompt tokenization: the whole chat template once, then only the messages that are new.

Generated tokens are never re-tokenized. After the first turn, new messages (tool results, user turns) are rendered
with the chat template *after a fixed stand-in conversation*, the stand-in's own rendering is cut off, and only the
remaining text is encoded and appended. The model's output ends with its stop token; the template's end-of-turn
text may go on after it (``<|im_end|>`` then ``\\n`` for ChatML), and that remainder is added to the new prompt
tokens so the token stream reads exactly as the template would render it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from strands.types.content import Message, Messages
from strands.types.tools import ToolSpec
from transformers import PreTrainedTokenizerBase

# A stand-in conversation ending in an assistant turn: new messages are rendered after it, so templates that need
# a user query before tool messages, or look at the previous message's role, render them as in a real conversation.
_STAND_IN: list[dict[str, Any]] = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
]
_MARK = "\u2063tito-end-of-turn\u2063"


class PromptError(ValueError):
    """The conversation or chat template cannot be tokenized incrementally."""


def _text_of(blocks: Sequence[Any]) -> str:
    parts: list[str] = []
    for block in blocks:
        if "text" in block:
            parts.append(block["text"])
        elif "json" in block:
            parts.append(json.dumps(block["json"], ensure_ascii=False))
        elif "image" in block or "document" in block or "video" in block:
            raise PromptError("image, document and video content is not supported by strands-tito yet")
    return "".join(parts)


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


def format_messages(messages: Messages, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """Strands messages as chat-template messages.

    Tool results become one ``tool`` message each, in the order the calls were made in the preceding assistant
    message (Strands collects them in completion order). Assistant text is kept verbatim: it is the model's raw
    output, tool-call markup included, so ``toolUse`` blocks are not rendered a second time.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    call_order: dict[str, int] = {}
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant":
            call_order = {
                block["toolUse"]["toolUseId"]: i for i, block in enumerate(b for b in content if "toolUse" in b)
            }
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
        out.extend({"role": "tool", "tool_call_id": r["toolUseId"], "content": _text_of(r["content"])} for r in results)
        text = _text_of([b for b in content if "toolResult" not in b])
        if text or not results:
            out.append({"role": "user", "content": text})
    return out


class PromptEncoder:
    """Encodes prompts for one tokenizer and chat template.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template.
        enable_thinking: Passed to the template (Qwen3-style templates); None leaves the template's default.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, enable_thinking: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs: dict[str, Any] = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        self._stand_in_text = self.render(_STAND_IN, add_generation_prompt=False)
        marked = self.render([*_STAND_IN[:2], {"role": "assistant", "content": _MARK}], add_generation_prompt=False)
        if _MARK not in marked:
            raise PromptError("the chat template does not render assistant content verbatim")
        self.end_of_turn_ids: list[int] = self.encode(marked.split(_MARK, 1)[1])

    def render(
        self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None, add_generation_prompt: bool
    ) -> str:
        """Render messages with the chat template to text."""
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=cast(Any, tools),
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )
        if not isinstance(text, str):
            raise PromptError("apply_chat_template(tokenize=False) did not return text")
        return text

    def encode(self, text: str) -> list[int]:
        """Encode text with no extra special tokens (the template already placed them)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def first_prompt(
        self, messages: Messages, tool_specs: Sequence[ToolSpec] | None, system_prompt: str | None
    ) -> list[int]:
        """The whole conversation rendered once (system, tools, messages, generation prompt) as token IDs."""
        text = self.render(
            format_messages(messages, system_prompt), tools=format_tool_specs(tool_specs), add_generation_prompt=True
        )
        return self.encode(text)

    def continuation(
        self, new_messages: Sequence[Message], previous: Message | None, context: Sequence[int]
    ) -> list[int]:
        """Token IDs for messages added after the model's last output.

        Args:
            new_messages: Messages after the model's last assistant message.
            previous: That assistant message (gives the order of its tool calls).
            context: The trajectory so far; its tail decides how much of the end-of-turn text is still missing.
        """
        if not new_messages:
            raise PromptError("no new messages to tokenize after the model's last turn")
        history = [previous] if previous is not None else []
        formatted = format_messages([*history, *new_messages])[len(history) :]
        text = self.render([*_STAND_IN, *formatted], add_generation_prompt=True)
        if not text.startswith(self._stand_in_text):
            raise PromptError("the chat template renders earlier messages differently once more are added")
        return self.encode(self._missing_end_of_turn(context) + text[len(self._stand_in_text) :])

    def _missing_end_of_turn(self, context: Sequence[int]) -> str:
        end = self.end_of_turn_ids
        for k in range(min(len(end), len(context)), 0, -1):
            if list(context[-k:]) == end[:k]:
                return str(self.tokenizer.decode(end[k:], skip_special_tokens=False))
        return str(self.tokenizer.decode(end, skip_special_tokens=False))
