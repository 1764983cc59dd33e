"""``strands_sglang.tool_parsers``: 0.6.2's names (its custom-parser base is :class:`.base.ToolParser`)."""

from strands_tito.compat.tool_parsers.base import TOOL_PARSER_REGISTRY, ToolParser, ToolParseResult, get_tool_parser
from strands_tito.providers.tool_parsers import GLMToolParser, HermesToolParser, KimiK2ToolParser, QwenXMLToolParser

__all__ = [
    "TOOL_PARSER_REGISTRY",
    "GLMToolParser",
    "HermesToolParser",
    "KimiK2ToolParser",
    "QwenXMLToolParser",
    "ToolParseResult",
    "ToolParser",
    "get_tool_parser",
]
