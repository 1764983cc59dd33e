"""``strands_sglang.tool_parsers.hermes``: :class:`HermesToolParser` (registered as ``"hermes"``)."""

from strands_tito.providers.tool_parsers.hermes import HermesToolParser

__all__ = ["HermesToolParser"]
