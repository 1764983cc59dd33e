"""Choosing a parser from a tokenizer (``tool_parser="auto"``), and warning about another format's markup.

Detection reads the tokenizer's chat template first: each format has marks that only its family's templates write
(checked against the real templates of each family, ``strands_tito.testing.chat_templates``). Auto never guesses: a
template that writes tool calls in a format none of the parsers reads (DeepSeek-R1's, say, whose tokenizer shares
DeepSeek-V3.1's special tokens) is refused, and the error shows how it writes a call; so is a template on which that
probe fails to render (its call cannot be seen, so it is never guessed from the special tokens). Only when the
template writes no tool calls at all (no template, or one without tool support) do the tokenizer's added special
tokens decide. When
neither names exactly one parser, :class:`ToolParserDetectionError` lists the parsers so the caller can pick one.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

from transformers.utils.chat_template_utils import render_jinja_template

from strands_tito.errors import StrandsTitoError
from strands_tito.providers.tool_parsers.base import ToolParser

__all__ = [
    "ToolParserDetectionError",
    "check_reads_template_calls",
    "detect_tool_parser",
    "foreign_markup",
    "warn_foreign_markup",
]

logger = logging.getLogger(__name__)


class ToolParserDetectionError(StrandsTitoError, ValueError):
    """The tool-call format could not be told from the tokenizer; name a parser explicitly."""


class _CallProbeError(Exception):
    """The chat template failed to render every form of the probe call (how it writes a call cannot be seen)."""


def _has(*marks: str) -> Callable[[str], bool]:
    return lambda text: all(mark in text for mark in marks)


# Marks in a chat template, per parser. Qwen3-Coder's and GLM's templates also write <tool_call>, hence the
# exclusions for hermes; DeepSeek-R1's template uses the same section tokens as V3.1 with a different call body
# (a ```json block after the tool type), hence its exclusion.
_TEMPLATE_MARKS: dict[str, Callable[[str], bool]] = {
    "hermes": lambda t: _has("<tool_call>", '"arguments"')(t) and "<function=" not in t and "<arg_key>" not in t,
    "qwen_xml": _has("<tool_call>", "<function=", "<parameter="),
    "glm": _has("<tool_call>", "<arg_key>", "<arg_value>"),
    "kimi_k2": _has("<|tool_calls_section_begin|>", "<|tool_call_argument_begin|>"),
    "deepseek_v31": lambda t: _has("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>")(t) and "```json" not in t,
    "gpt_oss": _has("<|channel|>", "<|call|>", "to="),
    "llama3_json": _has("<|start_header_id|>", '"parameters": '),
    "minimax_m2": _has("<minimax:tool_call>", "<invoke name="),
    "deepseek_v32": _has("｜DSML｜", "'function_calls>"),
    "deepseek_v4": _has("｜DSML｜", "'tool_calls>"),
    "mistral": _has("[TOOL_CALLS]"),
    "seed_oss": _has("<seed:tool_call>", "<function="),
}

# Special tokens only one family's vocabulary has. Qwen's <tool_call> is shared by hermes and qwen_xml models, so
# it decides nothing here.
_TOKEN_MARKS: dict[str, tuple[str, ...]] = {
    "glm": ("<arg_key>", "<|observation|>"),
    "kimi_k2": ("<|tool_calls_section_begin|>",),
    "deepseek_v31": ("<｜tool▁calls▁begin｜>",),
    "gpt_oss": ("<|call|>", "<|channel|>"),
    "llama3_json": ("<|python_tag|>",),
    "minimax_m2": ("<minimax:tool_call>",),
    "mistral": ("[TOOL_CALLS]",),
    "seed_oss": ("<seed:tool_call>",),
}


def _template_text(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates (e.g. "default" and "tool_use")
        return "\n".join(str(t) for t in template.values())
    return template if isinstance(template, str) else ""


def _special_token_variables(tokenizer: Any) -> dict[str, str]:
    """The special tokens a chat template reads as variables (``bos_token``, ``eos_token`` ...)."""
    return {k: v for k, v in (getattr(tokenizer, "special_tokens_map", None) or {}).items() if isinstance(v, str)}


def _special_tokens(tokenizer: Any) -> set[str]:
    tokens: set[str] = set()
    get_added = getattr(tokenizer, "get_added_vocab", None)
    if callable(get_added):
        tokens.update(get_added())
    tokens.update(getattr(tokenizer, "all_special_tokens", None) or [])
    return tokens


_PROBE_TOOL = "tito_probe_tool"
# Nine alphanumerics: Mistral's templates refuse any other call id.
_PROBE_CALL_ID = "c00000000"
_PROBE_USER = "tito-probe-user"


def written_call(template: str, special_tokens: dict[str, Any] | None = None) -> str | None:
    """What ``template`` writes for an assistant turn holding one probe call, None if it writes no call.

    The call is tried with its arguments as a mapping and as JSON text, and the turn's content as ``""`` and as
    ``None`` (templates want one or the other).

    Raises:
        _CallProbeError: No form renders (the last form's error is its cause).
    """
    tool = {
        "type": "function",
        "function": {"name": _PROBE_TOOL, "description": "", "parameters": {"type": "object", "properties": {}}},
    }
    failure: Exception | None = None
    rendered_any = False
    for arguments, content in (({"a": 1}, ""), ('{"a": 1}', ""), ({"a": 1}, None), ('{"a": 1}', None)):
        call = {"id": _PROBE_CALL_ID, "type": "function", "function": {"name": _PROBE_TOOL, "arguments": arguments}}
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": _PROBE_USER},
            {"role": "assistant", "content": content, "tool_calls": [call]},
        ]
        try:
            text = _render(template, messages, tool, special_tokens, generation=False)
            prompt = _render(template, messages[:1], tool, special_tokens, generation=True)
        except Exception as e:  # this form is refused, or the template needs what the probe lacks
            failure = e
            continue
        rendered_any = True
        # What the model writes follows the generation prompt (or as much of it as the template re-renders; cut at
        # a tag's or line's end, so that a tag both share in part stays whole).
        shared = len(os.path.commonprefix([text, prompt]))  # noqa: RUF071 (strings, not paths)
        shared = max(text.rfind(">", 0, shared), text.rfind("\n", 0, shared)) + 1 if shared < len(prompt) else shared
        turn = text[shared:]
        if _PROBE_TOOL in turn:
            return turn
    if not rendered_any:
        raise _CallProbeError(f"{type(failure).__name__}: {failure}") from failure
    return None


def _render(template: str, messages: list[dict[str, Any]], tool: Any, special_tokens: Any, *, generation: bool) -> str:
    rendered = render_jinja_template(
        [messages], tools=[tool], chat_template=template, add_generation_prompt=generation, **(special_tokens or {})
    )
    return str(rendered[0][0])


@functools.lru_cache(maxsize=64)
def _written_call_once(template: str, special_tokens: tuple[tuple[str, str], ...]) -> str | None:
    # Rendered once per template and special tokens, not once per model (RL rollouts build a model per episode).
    return written_call(template, dict(special_tokens))


def rendered_call(template: str, special_tokens: dict[str, Any] | None = None) -> str | None:
    """How ``template`` writes an assistant's tool call (the text around a probe call), None if it writes none.

    Raises:
        _CallProbeError: The template fails to render the probe call.
    """
    turn = written_call(template, special_tokens)
    if turn is None:
        return None
    position = turn.find(_PROBE_TOOL)
    return turn[max(0, position - 60) : position + 60]


def check_reads_template_calls(parser: ToolParser, tokenizer: Any) -> None:
    """Refuse ``parser`` for the tokenizer when its template writes a call the parser does not read.

    Raises:
        ToolParserDetectionError: The template's marks named the parser, but the call it writes is another format.
    """
    template = _template_text(tokenizer)
    special = _special_token_variables(tokenizer)
    try:
        turn = _written_call_once(template, tuple(sorted(special.items()))) if template else None
    except _CallProbeError:
        turn = None  # the marks named the parser; the encoder's own checks meet this template's rendering errors
    if turn is None or any(c.error is None and c.name == _PROBE_TOOL for c in parser.parse(turn)):
        return
    position = turn.find(_PROBE_TOOL)
    raise ToolParserDetectionError(
        f"cannot choose a tool parser for this tokenizer: its chat template looks like {parser.name}'s but writes a "
        f"tool call as {turn[max(0, position - 60) : position + 60]!r}, which {parser.name} does not read; pass "
        "tool_parser= a parser for it"
    )


def detect_tool_parser(tokenizer: Any, known: Iterable[str] | None = None) -> str:
    """The registry name of the parser for the tokenizer's model (its chat template, then its special tokens).

    Raises:
        ToolParserDetectionError: Neither names exactly one parser; the message lists the parsers.
    """
    names = sorted(known if known is not None else _TEMPLATE_MARKS)
    template = _template_text(tokenizer)
    by_template = [name for name, test in _TEMPLATE_MARKS.items() if template and test(template)]
    if len(by_template) == 1:
        return by_template[0]
    try:
        written = rendered_call(template, _special_token_variables(tokenizer)) if not by_template and template else None
    except _CallProbeError as e:
        raise ToolParserDetectionError(
            "cannot choose a tool parser for this tokenizer: its chat template matches no parser's marks and fails to "
            f"render an assistant's tool call ({e}), so how it writes a call cannot be seen; pass tool_parser= one of "
            f"{names} if the model's format is one of them"
        ) from e
    if written is not None:
        raise ToolParserDetectionError(
            f"cannot choose a tool parser for this tokenizer: its chat template writes tool calls as {written!r}, a "
            f"format none of the parsers {names} reads; pass tool_parser= a parser for it"
        )
    tokens = _special_tokens(tokenizer)
    by_tokens = [name for name, marks in _TOKEN_MARKS.items() if all(mark in tokens for mark in marks)]
    if not by_template and len(by_tokens) == 1:
        return by_tokens[0]
    found = by_template or by_tokens
    why = f"it matches several formats {found}" if found else "its chat template and special tokens match none"
    raise ToolParserDetectionError(
        f"cannot choose a tool parser for this tokenizer: {why}; pass tool_parser= one of {names}"
    )


def foreign_markup(parser: ToolParser, text: str, parsers: Iterable[type[ToolParser]]) -> list[str]:
    """Names of the other formats whose parser reads a well-formed call in ``text`` (empty for the parser's own).

    Markup that merely looks like another format's (Seed-OSS's ``<function=...>`` inside ``<seed:tool_call>``, which
    ``qwen_xml`` does not read) names no format: a parser is recommended only if it would run the call.
    """
    return [
        other.name
        for other in parsers
        if other.name != parser.name
        and other.markup.search(text) is not None
        and any(call.error is None for call in other().parse(text))
    ]


def warn_foreign_markup(parser: ToolParser, text: str, parsers: Iterable[type[ToolParser]]) -> list[str]:
    """Log a warning, once per parser and foreign format, when ``text`` holds another format's call markup.

    Such calls are not read by ``parser`` (they stay plain text), which usually means the wrong parser was chosen.
    Returns the formats warned about now.
    """
    new = [name for name in foreign_markup(parser, text, parsers) if name not in parser.warned_formats]
    for name in new:
        parser.warned_formats.add(name)
        logger.warning(
            "parser=<%s>, matching_parser=<%s> | model output contains tool call markup of another format; "
            "those calls are not executed; use tool_parser=%r if this is the model's format",
            parser.name,
            name,
            name,
        )
    return new
