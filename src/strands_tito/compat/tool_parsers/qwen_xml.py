"""``strands_sglang.tool_parsers.qwen_xml``: :class:`QwenXMLToolParser` (registered as ``"qwen_xml"``)."""

from strands_tito.providers.tool_parsers.xml import QwenXMLToolParser

__all__ = ["QwenXMLToolParser"]
