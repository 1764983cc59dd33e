"""Strict, on-policy tool-call parsers, one per model family's format.

A parser reads the model's raw output text and returns the calls exactly as written. Nothing is repaired: a call
that is not well-formed becomes a :class:`ToolCall` with ``error`` set, which the model provider turns into a tool
error the model sees (reason and raw text) instead of running anything. Reasoning is never executed. What is
checked for every format is in :mod:`.base`; each format's module says what it accepts.

=================  ===========================================  =============================
registry name      models                                       class
=================  ===========================================  =============================
``hermes``         Qwen3, QwQ, Qwen2.5 (Hermes JSON)            :class:`HermesToolParser`
``qwen_xml``       Qwen3-Coder, Qwen3.5/3.6                     :class:`QwenXMLToolParser`
``glm``            GLM-4.5, 4.6, 4.7                            :class:`GLMToolParser`
``kimi_k2``        Kimi-K2 Instruct and Thinking                :class:`KimiK2ToolParser`
``deepseek_v31``   DeepSeek-V3.1                                :class:`DeepSeekV31ToolParser`
``gpt_oss``        gpt-oss (harmony)                            :class:`GptOssToolParser`
``llama3_json``    Llama 3.1, 3.2, 3.3                          :class:`Llama3JsonToolParser`
``minimax_m2``     MiniMax-M2                                   :class:`MiniMaxM2ToolParser`
``deepseek_v32``   DeepSeek-V3.2 (DSML)                         :class:`DeepSeekV32ToolParser`
``deepseek_v4``    DeepSeek-V4 (DSML)                           :class:`DeepSeekV4ToolParser`
``mistral``        Mistral-Small, Devstral, Magistral           :class:`MistralToolParser`
``seed_oss``       ByteDance Seed-OSS                           :class:`SeedOSSToolParser`
=================  ===========================================  =============================

``get_tool_parser("auto", tokenizer=...)`` (and :func:`detect_tool_parser`) picks the parser from the tokenizer's
chat template and special tokens. :func:`register_tool_parser` adds a parser of your own (strands-sglang 0.6.2's
module paths and parser base class: :mod:`strands_tito.compat.tool_parsers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strands_tito.errors import StrandsTitoError
from strands_tito.providers.tool_parsers.base import UNKNOWN_TOOL_NAME, ToolCall, ToolParser, new_call_id
from strands_tito.providers.tool_parsers.detect import (
    ToolParserDetectionError,
    check_reads_template_calls,
    detect_tool_parser,
    foreign_markup,
)
from strands_tito.providers.tool_parsers.detect import warn_foreign_markup as _warn_foreign_markup
from strands_tito.providers.tool_parsers.dsml import DeepSeekV4ToolParser, DeepSeekV32ToolParser
from strands_tito.providers.tool_parsers.harmony import GptOssToolParser
from strands_tito.providers.tool_parsers.hermes import HermesToolParser
from strands_tito.providers.tool_parsers.llama import Llama3JsonToolParser
from strands_tito.providers.tool_parsers.mistral import MistralToolParser
from strands_tito.providers.tool_parsers.sections import DeepSeekV31ToolParser, KimiK2ToolParser
from strands_tito.providers.tool_parsers.seed_oss import SeedOSSToolParser
from strands_tito.providers.tool_parsers.xml import GLMToolParser, MiniMaxM2ToolParser, QwenXMLToolParser

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser
    for parser in (
        HermesToolParser,
        QwenXMLToolParser,
        GLMToolParser,
        KimiK2ToolParser,
        DeepSeekV31ToolParser,
        GptOssToolParser,
        Llama3JsonToolParser,
        MiniMaxM2ToolParser,
        DeepSeekV32ToolParser,
        DeepSeekV4ToolParser,
        MistralToolParser,
        SeedOSSToolParser,
    )
}


def register_tool_parser[P: type[ToolParser]](name: str) -> Callable[[P], P]:
    """Class decorator: make a parser available as ``get_tool_parser(name)`` and ``SGLangModel(tool_parser=name)``."""

    def register(parser: P) -> P:
        if "name" not in vars(parser):  # a new class takes the name; a parser registered again keeps its own
            parser.name = name
        TOOL_PARSERS[name] = parser
        return parser

    return register


class UnknownToolParserError(StrandsTitoError, KeyError, ValueError):
    """No parser is registered under the name (a ``KeyError`` as in strands-sglang 0.6, and a ``ValueError``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def get_tool_parser(name: str = "auto", *, tokenizer: Any = None, **kwargs: Any) -> ToolParser:
    """Return a new parser by registry name, or the tokenizer's (``"auto"``, see :func:`detect_tool_parser`).

    Args:
        name: A key of :data:`TOOL_PARSERS`, or ``"auto"``.
        tokenizer: The model's tokenizer; required for ``"auto"``.
        kwargs: Passed to the parser class (e.g. ``think_start``/``think_end``).

    Raises:
        UnknownToolParserError: Unknown name (a ``KeyError`` and a ``ValueError``).
        ValueError: ``"auto"`` without a tokenizer.
        ToolParserDetectionError: ``"auto"`` could not decide (a ``ValueError``; the message lists the parsers).
    """
    if name == "auto":
        if tokenizer is None:
            raise ValueError(f'tool parser "auto" needs the tokenizer; or name one of {sorted(TOOL_PARSERS)}')
        parser = get_tool_parser(detect_tool_parser(tokenizer, TOOL_PARSERS), **kwargs)
        check_reads_template_calls(parser, tokenizer)  # the marks matched: the template's own call must parse
        return parser
    try:
        parser_class = TOOL_PARSERS[name]
    except KeyError:
        raise UnknownToolParserError(f"unknown tool parser {name!r}; known: {sorted(TOOL_PARSERS)} or 'auto'") from None
    return parser_class(**kwargs)


def warn_foreign_markup(parser: ToolParser, text: str) -> list[str]:
    """Warn once per parser and format when ``text`` holds another format's call markup (see :mod:`.detect`)."""
    return _warn_foreign_markup(parser, text, TOOL_PARSERS.values())


__all__ = [
    "TOOL_PARSERS",
    "UNKNOWN_TOOL_NAME",
    "DeepSeekV4ToolParser",
    "DeepSeekV31ToolParser",
    "DeepSeekV32ToolParser",
    "GLMToolParser",
    "GptOssToolParser",
    "HermesToolParser",
    "KimiK2ToolParser",
    "Llama3JsonToolParser",
    "MiniMaxM2ToolParser",
    "MistralToolParser",
    "QwenXMLToolParser",
    "SeedOSSToolParser",
    "ToolCall",
    "ToolParser",
    "ToolParserDetectionError",
    "UnknownToolParserError",
    "detect_tool_parser",
    "foreign_markup",
    "get_tool_parser",
    "new_call_id",
    "register_tool_parser",
    "warn_foreign_markup",
]
