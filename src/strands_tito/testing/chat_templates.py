"""The chat templates of the model families RL users train: each family's reference, and llama.cpp's copies.

:func:`reference_chat_template` is the template the harness serves for a family
(:func:`~strands_tito.testing.family_tokenizers.family_tokenizer`, ``strands-tito engine|demo --chat-template``): the
model's Hugging Face original where one was found, vendored in this package (``data/templates/``, provenance and
sha256 in its ``manifest.json``: :func:`template_manifest`), else llama.cpp's copy. llama.cpp's copies stay available
as such (:func:`real_chat_template`): several are edits of the original (DeepSeek-V3.1's ``| tojson``, Kimi-K2's
regenerated call ids, QwQ's added thinking switch, ...), which the tests render as extra cases.

llama.cpp keeps copies of Hugging Face chat templates (most byte-exact, some edited) under ``models/templates/`` (one
file per model, named after its Hub repository, e.g. ``Qwen-Qwen3-0.6B.jinja``), and the ``llama-cpp-python`` sdist on
PyPI vendors that folder. :func:`real_templates_dir` downloads the sdist once with pip (about 77 MB, no build), keeps
only the templates (under the cache root, see :func:`strands_tito.testing.tokenizers.default_cache_root`) and returns
the folder; :func:`real_chat_template` reads one template by file name. Nothing here touches the Hugging Face hub.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Final

from strands_tito.errors import StrandsTitoError
from strands_tito.providers.families import family
from strands_tito.testing.sdist import SdistFetchError, cached_sdist_folder
from strands_tito.testing.tokenizers import default_cache_root

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "VENDORED_TEMPLATES",
    "TemplateFetchError",
    "real_chat_template",
    "real_templates_dir",
    "reference_chat_template",
    "template_manifest",
]

#: The sdist whose vendored ``llama.cpp/models/templates`` folder is the source of the real templates.
LLAMA_CPP_PYTHON_VERSION: Final[str] = "0.3.36"
_TEMPLATES_IN_SDIST: Final[str] = "vendor/llama.cpp/models/templates/"
#: The vendored Hugging Face originals and their ``manifest.json`` (package data, shipped in the wheel).
VENDORED_TEMPLATES: Final[Path] = Path(__file__).resolve().parent / "data" / "templates"


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


@functools.cache
def template_manifest() -> dict[str, Any]:
    """The provenance of each family's reference template (``families`` by family name; ``refused``: families the
    encoder refuses, with their originals), as recorded in ``data/templates/manifest.json``. Treat as read-only."""
    loaded: dict[str, Any] = json.loads((VENDORED_TEMPLATES / "manifest.json").read_text(encoding="utf-8"))
    return loaded


def reference_chat_template(family_name: str) -> str:
    """The reference template of a model family (a name or alias of :data:`~strands_tito.providers.families.FAMILIES`):
    its vendored Hugging Face original where the manifest records one as the reference, else llama.cpp's copy."""
    spec = family(family_name)
    entry = template_manifest()["families"].get(spec.name, {})
    if entry.get("reference") == "original":
        file: str = entry["original"]["file"]
        return (VENDORED_TEMPLATES / file).read_text(encoding="utf-8")
    return real_chat_template(spec.template)
