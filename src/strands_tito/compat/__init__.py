"""strands-sglang compatibility, all of it: its module paths, its names and its old signatures.

A strands-sglang 0.6 user switches by changing one import, ``strands_sglang`` -> ``strands_tito``. The names that
module exported at the top level are :mod:`strands_tito`'s own (``SGLangModel``, ``SGLangClient``, ``Rollout``,
``LoopLimiter``, ``get_client`` ...). Its other module paths are served from this package, one module per path, each
holding exactly what that module held in 0.6.2 (``strands_tito.client`` is :mod:`strands_tito.compat.client`, and
so on; :data:`MODULE_PATHS` lists them). What differs from 0.6.2, and why, is the migration table
(``docs/migration.md``, linked from the README).

A few 0.6.2 names must be attributes of strands-tito's own classes to work at all; they are listed here so this
package stays the one place to read:

- ``SGLangModel``: ``rollout`` / ``token_manager`` (the seed's name) for ``trajectory``, ``rollout_history``,
  ``processed_messages``, ``tool_parse_errors``, the nested ``SGLangConfig``, ``format_messages`` and
  ``format_tool_specs`` (extension points, as in 0.6.2). Not provided, because the
  exact incremental encoder (``strands_tito.providers.prompt``) replaces the re-rendering they belong to:
  ``format_content_block``, ``sort_tool_results``, ``collect_image_data``, ``tokenize_prompt_messages``,
  ``message_separator``;
- ``SGLangClient`` (SGLang's routes on the shared transport ``TokenClient``): ``max_retries`` and ``retry_delay``
  (fields of its :class:`RetryPolicy`), ``close()``, ``generate(input_ids, **fields)``;
- ``ServerHTTPError``: 0.6.2's constructor ``(message, *, status, body)``; the ``SGLang*`` error names
  (:mod:`strands_tito.errors`);
- ``Trajectory``: ``Rollout`` is the same class; ``segment_info``, ``initial_prompt_length``;
- ``ToolLimiter`` / ``ToolLimitReachedError`` (0.3's names for ``LoopLimiter`` and its error);
- ``ToolParser``: the ``think_start_token`` / ``think_end_token`` options and ``think_pattern``;
  ``TaggedCallParser``: the ``tool_start_token`` / ``tool_end_token`` options and ``tool_pattern``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["MODULE_PATHS", "install_module_paths"]

#: strands-sglang 0.6.2's module paths (under ``strands_tito`` after the one-import switch) -> the module serving it.
MODULE_PATHS: dict[str, str] = {
    f"strands_tito.{name}": f"strands_tito.compat.{name}"
    for name in (
        "client", "exceptions", "limiter", "rollout", "sglang", "utils", "tool_parsers", "tool_parsers.base",
        "tool_parsers.glm", "tool_parsers.hermes", "tool_parsers.kimi_k2", "tool_parsers.qwen_xml",
    )
}  # fmt: skip


class _ModulePathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a strands-sglang module path as the module of this package that serves it (one module object)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        serving = MODULE_PATHS.get(fullname)
        return None if serving is None else importlib.machinery.ModuleSpec(fullname, self, origin=serving)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(str(spec.origin))
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the serving module has run already


def install_module_paths() -> None:
    """Make :data:`MODULE_PATHS` importable (done once, by ``import strands_tito``)."""
    if not any(isinstance(finder, _ModulePathFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ModulePathFinder())
