"""The real Hugging Face chat templates of the model families RL users train, fetched offline from PyPI.

llama.cpp keeps byte-exact copies of Hugging Face chat templates under ``models/templates/`` (one file per model, named
after its Hub repository, e.g. ``Qwen-Qwen3-0.6B.jinja``), and the ``llama-cpp-python`` sdist on PyPI vendors that
folder. :func:`real_templates_dir` downloads the sdist once with pip (about 77 MB, no build), keeps only the templates
(under the cache root, see :func:`strands_tito.tokenizers.default_cache_root`) and returns the folder;
:func:`real_chat_template` reads one template by file name. Nothing here touches the Hugging Face hub.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from strands_tito.errors import StrandsTitoError
from strands_tito.tokenizers import default_cache_root

__all__ = ["LLAMA_CPP_PYTHON_VERSION", "TemplateFetchError", "real_chat_template", "real_templates_dir"]

#: The sdist whose vendored ``llama.cpp/models/templates`` folder is the source of the real templates.
LLAMA_CPP_PYTHON_VERSION: Final[str] = "0.3.36"
_TEMPLATES_IN_SDIST: Final[str] = "vendor/llama.cpp/models/templates/"


class TemplateFetchError(StrandsTitoError, RuntimeError):
    """The real chat templates could not be downloaded or read."""


def real_templates_dir(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding the real chat templates, downloading them on first use.

    Safe to call from several processes at once: one downloads while the others wait on a file lock.
    """
    root = Path(cache_root).expanduser() if cache_root is not None else default_cache_root()
    target = root / f"chat-templates-llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}"
    if target.is_dir():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / ".chat-templates.lock"):
        if not target.is_dir():
            _download(target)
    return target


def real_chat_template(name: str, cache_root: str | os.PathLike[str] | None = None) -> str:
    """The text of one real template, by file name with or without ``.jinja`` (e.g. ``"Qwen-Qwen3-0.6B"``)."""
    folder = real_templates_dir(cache_root)
    path = folder / (name if name.endswith(".jinja") else f"{name}.jinja")
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.jinja"))
        raise TemplateFetchError(f"no real chat template named {name!r}; known: {known}")
    return path.read_text(encoding="utf-8")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".chat-templates-") as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
            "--dest", tmp, f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        sdists = list(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise TemplateFetchError(
                f"could not download the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist from PyPI "
                f"(it carries the real chat templates): {done.stderr.strip()[-500:]}"
            )
        staging = Path(tmp) / "templates"
        staging.mkdir()
        with tarfile.open(sdists[0], "r:gz") as sdist:
            for member in sdist.getmembers():
                # "<sdist root>/vendor/llama.cpp/models/templates/<file>"; only plain files straight in that folder.
                _, _, rest = member.name.partition("/")
                if not member.isfile() or not rest.startswith(_TEMPLATES_IN_SDIST):
                    continue
                name = rest[len(_TEMPLATES_IN_SDIST) :]
                if not name or "/" in name:
                    continue
                source = sdist.extractfile(member)
                if source is not None:
                    (staging / name).write_bytes(source.read())
        if not any(staging.glob("*.jinja")):
            raise TemplateFetchError(f"the llama-cpp-python sdist holds no {_TEMPLATES_IN_SDIST}*.jinja files")
        shutil.move(str(staging), str(target))
