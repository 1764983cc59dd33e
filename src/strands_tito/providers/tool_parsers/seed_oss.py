"""ByteDance Seed-OSS calls (``seed_oss``).

``<seed:tool_call>\\n<function=N>\\n<parameter=P>V</parameter>\\n...</function>\\n</seed:tool_call>``: Qwen3-Coder's
XML (:class:`~strands_tito.providers.tool_parsers.xml.QwenXMLToolParser`, same strictness) in Seed's own tags, with
the value written right after its tag (no newlines around it). The template writes a non-string value with Jinja's
``string`` filter: numbers and booleans (``True``/``False``) read back by the parameter's schema type; Python's
spelling of lists and dicts is not JSON and stays text. Reasoning is ``<seed:think>...</seed:think>``; the turn ends
with ``<seed:eos>``.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from strands_tito.providers.tool_parsers.xml import QwenXMLToolParser

__all__ = ["SeedOSSToolParser"]


class SeedOSSToolParser(QwenXMLToolParser):
    """Seed-OSS ``<seed:tool_call>`` calls."""

    name = "seed_oss"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<seed:eos>",)
    markup: ClassVar[re.Pattern[str]] = re.compile(r"<seed:tool_call>")
    call_start = "<seed:tool_call>"
    call_end = "</seed:tool_call>"
    value_newlines: ClassVar[bool] = False

    def __init__(
        self,
        tool_start_token: str | None = None,
        tool_end_token: str | None = None,
        *,
        think_start: str = "<seed:think>",
        think_end: str = "</seed:think>",
        **kwargs: Any,
    ) -> None:
        super().__init__(tool_start_token, tool_end_token, think_start=think_start, think_end=think_end, **kwargs)
