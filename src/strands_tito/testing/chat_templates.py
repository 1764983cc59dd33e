"""The real Hugging Face chat templates of the model families RL users train, fetched offline from PyPI.

llama.cpp keeps byte-exact copies of Hugging Face chat templates under ``models/templates/`` (one file per model, named
after its Hub repository, e.g. ``Qwen-Qwen3-0.6B.jinja``), and the ``llama-cpp-python`` sdist on PyPI vendors that
folder. :func:`real_templates_dir` downloads the sdist once with pip (about 77 MB, no build), keeps only the templates
(under the cache root, see :func:`strands_tito.testing.tokenizers.default_cache_root`) and returns the folder;
:func:`real_chat_template` reads one template by file name. Nothing here touches the Hugging Face hub.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from strands_tito.errors import StrandsTitoError
from strands_tito.testing.sdist import SdistFetchError, cached_sdist_folder
from strands_tito.testing.tokenizers import default_cache_root

__all__ = ["LLAMA_CPP_PYTHON_VERSION", "TemplateFetchError", "real_chat_template", "real_templates_dir"]

#: The sdist whose vendored ``llama.cpp/models/templates`` folder is the source of the real templates.
LLAMA_CPP_PYTHON_VERSION: Final[str] = "0.3.36"
_TEMPLATES_IN_SDIST: Final[str] = "vendor/llama.cpp/models/templates/"


class TemplateFetchError(StrandsTitoError, RuntimeError):
    """The real chat templates could not be downloaded or read."""


def real_templates_dir(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding the real chat templates, downloading them on first use (safe from several processes)."""
    root = Path(cache_root).expanduser() if cache_root is not None else default_cache_root()
    target = root / f"chat-templates-llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}"
    requirement = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"
    try:
        return cached_sdist_folder(requirement, _TEMPLATES_IN_SDIST, target, subfolders=False)
    except SdistFetchError as e:
        raise TemplateFetchError(f"{e} (its sdist carries the real chat templates)") from e


def real_chat_template(name: str, cache_root: str | os.PathLike[str] | None = None) -> str:
    """The text of one real template, by file name with or without ``.jinja`` (e.g. ``"Qwen-Qwen3-0.6B"``)."""
    folder = real_templates_dir(cache_root)
    path = folder / (name if name.endswith(".jinja") else f"{name}.jinja")
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.jinja"))
        raise TemplateFetchError(f"no real chat template named {name!r}; known: {known}")
    return path.read_text(encoding="utf-8")
