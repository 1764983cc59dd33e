"""``strands_sglang.tool_parsers.glm``: :class:`GLMToolParser` (registered as ``"glm"``)."""

from strands_tito.providers.tool_parsers.xml import GLMToolParser

__all__ = ["GLMToolParser"]
