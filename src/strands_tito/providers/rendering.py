"""Chat template rendering as transformers does it, also for templates that change lists (Kimi-K2's llama.cpp copies).

transformers renders chat templates in a jinja2 ``ImmutableSandboxedEnvironment``, which refuses ``list.append``
and ``list.pop``. Some real templates call them: the llama.cpp copies of ``Kimi-K2-Instruct`` and
``Kimi-K2-Thinking`` queue the call ids they write (``tool_response_queue.ids.append(...)``) and take them back for
the tool results (``.pop(0)``). Serving stacks that render those copies (llama.cpp's own Jinja engine) allow it.

:func:`render_chat_template` renders with ``tokenizer.apply_chat_template`` and, only when the immutable sandbox
refuses a list change, renders again in a jinja2 ``SandboxedEnvironment`` (still a sandbox: no attribute or dunder
access beyond what jinja2 allows, only the mutation of the template's own lists and dicts is permitted) configured
exactly as transformers configures its chat-template environment: the same options (``trim_blocks``,
``lstrip_blocks``), extensions (loop controls, ``{% generation %}``), filters (transformers' ``tojson``) and
globals (``raise_exception``, ``strftime_now``, ``dict``, ``namespace``), taken from transformers' own compiled
environment, and the same template inputs (messages without ``None`` values, reasoning also under ``thinking``,
the tokenizer's special tokens). Where the immutable sandbox renders, both give the same text (tested).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, cast

import jinja2
from jinja2.sandbox import SandboxedEnvironment
from transformers import PreTrainedTokenizerBase

from strands_tito.upstream.transformers_lib import compiled_chat_template

__all__ = ["render_chat_template", "render_mutable"]

#: Names a message's reasoning is passed under (transformers fills ``reasoning_content`` and ``thinking``).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def render_chat_template(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool,
    chat_template: str | None = None,
    **kwargs: Any,
) -> str:
    """``tokenizer.apply_chat_template(..., tokenize=False)``, or the mutable-sandbox rendering where it refuses.

    ``chat_template``: the template text to render (default: the tokenizer's own).

    Raises:
        jinja2.TemplateError: The template raised (``raise_exception``) or refused something other than a list
            or dict change.
    """
    try:
        text = tokenizer.apply_chat_template(
            list(messages),
            tools=cast(Any, None if tools is None else list(tools)),
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            chat_template=chat_template,
            **kwargs,
        )
    except jinja2.exceptions.SecurityError as e:
        if not _refuses_mutation(e):
            raise
        return render_mutable(
            tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template=chat_template,
            **kwargs,
        )
    if not isinstance(text, str):
        raise TypeError("apply_chat_template(tokenize=False) did not return text")
    return text


def render_mutable(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[dict[str, Any]],
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool,
    chat_template: str | None = None,
    **kwargs: Any,
) -> str:
    """The tokenizer's chat template (or ``chat_template``) rendered as transformers would, with list and dict
    changes allowed."""
    source = tokenizer.chat_template if chat_template is None else chat_template
    if not isinstance(source, str):
        raise ValueError("the tokenizer has no single chat template")
    chat = [_plain_message(m) for m in messages]
    variables: dict[str, Any] = {**tokenizer.special_tokens_map, **_plain(kwargs)}
    return _mutable_template(source).render(
        messages=chat,
        tools=_plain(None if tools is None else list(tools)),
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **variables,
    )


def _refuses_mutation(error: jinja2.exceptions.SecurityError) -> bool:
    # jinja2's ImmutableSandboxedEnvironment: "access to attribute 'append' of 'list' object is unsafe."
    text = str(error)
    return "of 'list' object" in text or "of 'dict' object" in text


@functools.lru_cache(maxsize=32)
def _mutable_template(source: str) -> jinja2.Template:
    # transformers' own compiled environment is the reference for options, extensions, filters and globals.
    strict = compiled_chat_template(source)
    base = strict.environment
    environment = SandboxedEnvironment(
        trim_blocks=base.trim_blocks,
        lstrip_blocks=base.lstrip_blocks,
        extensions=[type(extension) for extension in base.extensions.values()],
    )
    environment.filters.update(base.filters)
    environment.globals.update(base.globals)
    return environment.from_string(source)


def _plain(value: Any) -> Any:
    """A fresh copy made of plain JSON types (the template may change it)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=lambda v: f"<{type(v).__name__}>"))


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    plain = {k: v for k, v in _plain(message).items() if v is not None}
    reasoning = next((plain[k] for k in _REASONING_FIELDS if plain.get(k) is not None), None)
    if reasoning is not None:
        plain = {"thinking": reasoning, **plain, "reasoning_content": reasoning}
    return plain
