"""JSONL: one trajectory per line, appended to one file."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from strands_tito.records import ExportedRecord, jsonl_bytes

from .base import ExporterConfigError

logger = logging.getLogger(__name__)


class JsonlExporter:
    """Appends records to a JSON Lines file.

    The position of a batch is ``<inode>:<offset>``: which file, and its size before the batch. Writing truncates that
    file back to the offset first, so a batch cut short by a crash is replaced, never duplicated. The exporter never
    extends or truncates a file it did not write: when the path holds another file by then (rotated by logrotate's
    ``create``, replaced, or moved away and recreated here), the batch goes to the end of that file as it is; a file
    shorter than the offset (``copytruncate``) is appended to, not padded. A path with no file is created again.

    Args:
        path: The JSONL file (created, with its directory).
        name: The exporter's name (default ``jsonl:PATH``).
        shared: Other processes append to the same file (embedded capture in several agent processes): each batch is
            appended in one ``O_APPEND`` write and never truncated, so no other process's lines are cut; the
            position is not used, and a batch written twice appears twice (embedded capture writes each once).
    """

    def __init__(self, path: str | os.PathLike[str], name: str | None = None, *, shared: bool = False) -> None:
        self.path = Path(path)
        self.shared = shared
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch(exist_ok=True)
        except OSError as e:
            raise ExporterConfigError(f"cannot write JSONL to {self.path}: {e}") from e
        self.name = name or f"jsonl:{self.path}"

    def next_position(self) -> str:
        """The file's identity and current end (the file is created if it was moved away)."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            stat = os.fstat(fd)
        finally:
            os.close(fd)
        return f"{stat.st_ino}:{stat.st_size}"

    def write(self, records: Sequence[ExportedRecord], position: str) -> None:
        """Write the batch at ``position`` (see the class) and fsync."""
        inode, _, offset_text = position.rpartition(":")  # a bare offset: a position from before inodes were kept
        offset = int(offset_text)
        data = jsonl_bytes(records)
        if self.shared:
            self._append(data)
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            stat = os.fstat(fd)
            ours = (not inode or int(inode) == stat.st_ino) and stat.st_size >= offset
            if not ours:
                logger.warning(
                    "path=<%s>, position=<%s> | the file was rotated, replaced or truncated; the batch goes to the end "
                    "of the file now there",
                    self.path,
                    position,
                )
                offset = stat.st_size
            os.ftruncate(fd, offset)
            try:
                view, at = memoryview(data), offset
                while view:
                    written = os.pwrite(fd, view, at)
                    view, at = view[written:], at + written
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):  # no torn line left behind (a full disk wrote part of it)
                    os.ftruncate(fd, offset)
                raise
        finally:
            os.close(fd)

    def _append(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one write for a regular file; the loop only covers an interrupted one
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Nothing stays open between batches."""
