"""slime's ``Sample``, from the stand-in the examples use (slime itself needs torch, Ray and Megatron)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_slime_stubs", Path(__file__).resolve().parents[2] / "examples" / "_slime_stubs.py"
)
assert _spec is not None and _spec.loader is not None
_stubs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stubs)
Sample = _stubs.Sample
