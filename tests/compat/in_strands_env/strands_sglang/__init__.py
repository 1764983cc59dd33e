"""``import strands_sglang`` answered by strands-tito, for the strands-env processes that
tests/compat/test_strands_env.py starts.

Test harness only: that test puts this folder on those processes' ``PYTHONPATH``; nothing is installed and strands-env
is not edited. ``strands_sglang`` becomes the :mod:`strands_tito` module itself and ``strands_sglang.X`` the module
``strands_tito.X`` (which serves strands-sglang 0.6.2's module paths, see :mod:`strands_tito.compat`), so every name
is strands-tito's own object.

With ``STRANDS_TITO_ROLLOUT_LOG`` set to a file path, every ``SGLangModel`` the process creates is kept, and at exit
each one's non-empty trajectories (``rollout_history``, then ``rollout``) are written there as JSON lines
(``Trajectory.model_dump_json``), in creation order, for the test to compare with what the engine received.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``strands_sglang.X`` -> the module ``strands_tito.X`` (one module object under both names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("strands_sglang."):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin="strands_tito" + fullname[len("strands_sglang") :])

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(str(spec.origin))
        sys.modules[spec.name] = module
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the strands_tito module has run already


def _record_rollouts(path: str) -> None:
    from strands_tito.providers.sglang import SGLangModel

    models: list[Any] = []
    init = SGLangModel.__init__

    def recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        models.append(self)

    def write() -> None:
        with open(path, "w", encoding="utf-8") as out:
            for model in models:
                for trajectory in [*model.rollout_history, model.rollout]:
                    if len(trajectory):
                        out.write(trajectory.model_dump_json() + "\n")

    SGLangModel.__init__ = recording_init  # type: ignore[method-assign]
    atexit.register(write)


sys.meta_path.insert(0, _Alias())
if os.environ.get("STRANDS_TITO_ROLLOUT_LOG"):
    _record_rollouts(os.environ["STRANDS_TITO_ROLLOUT_LOG"])
sys.modules[__name__] = importlib.import_module("strands_tito")
