"""``strands_sglang.tool_parsers.kimi_k2``: :class:`KimiK2ToolParser` (registered as ``"kimi_k2"``)."""

from strands_tito.providers.tool_parsers.sections import KimiK2ToolParser

__all__ = ["KimiK2ToolParser"]
