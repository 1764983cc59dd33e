"""Warnings for configuration keys a provider does not define (a typo is named, not silently ignored)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["warn_unknown_config_keys"]


def warn_unknown_config_keys(config: Mapping[str, Any], config_type: type) -> None:
    """Warn, naming them and the valid keys, about configuration keys ``config_type`` (a ``TypedDict``) lacks.

    Like Strands' own providers, an unknown key is only warned about (and kept): a typo such as ``sampling_param``
    would otherwise be silently ignored. The warning points at the caller's line, outside strands-tito.
    """
    valid = set(getattr(config_type, "__required_keys__", ())) | set(getattr(config_type, "__optional_keys__", ()))
    unknown = sorted(set(config) - valid)
    if unknown:
        warnings.warn(
            f"unknown {config_type.__name__} key(s) {unknown}; valid keys are {sorted(valid)}",
            UserWarning,
            skip_file_prefixes=(_PACKAGE_DIR,),
        )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
