"""The collector's durable store: SQLite in WAL mode.

What lives here, and why it makes ``kill -9`` safe:

- ``spans``: every strands-tito span received for a trajectory that is still open, keyed by ``(trace_id, span_id)``
  so an OTLP retry is stored once. A request is acknowledged only after its spans are committed.
- ``trajectories``: one row per trajectory ever seen: open, or finished (then kept so late duplicates are ignored
  instead of written again), plus conflicts found on the way.
- ``written_spans``: the ``(trace_id, span_id)`` keys of every span of a finished trajectory, so that a late OTLP
  retry (same keys) is told from new spans that reuse a trajectory id after its record was written (refused).
- ``outbox``: finished trajectories waiting for an exporter, one row per (exporter, trajectory). Finishing a
  trajectory moves it from ``spans`` to ``outbox`` in one transaction.
- one ``flock`` on ``<database>.lock`` for as long as a collector has the store open: a second collector on the
  same store stops at once (:class:`StoreInUse`) instead of writing the same outputs.
- the write-ahead log is bounded: checkpointed every :data:`WAL_CHECKPOINT_PAGES` pages and truncated back to
  :data:`WAL_LIMIT_BYTES` after a checkpoint, and :meth:`Store.size_bytes` counts the pages that hold data (not free
  pages, not the log), so the ``--max-store-mb`` back-pressure clears once the exporters catch up.
- ``batches``: an export in progress. The batch and the position it writes to are committed *before* the exporter
  writes; after a crash the same batch is written again at the same position, which replaces the partial write.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from strands_tito.errors import StrandsTitoError
from strands_tito.records import ExportedRecord, record_from_json

BATCH_BYTES = 16 * 1024 * 1024
"""Most record text in one export batch (a record is about 10x its text as Python objects while exported)."""
WAL_CHECKPOINT_PAGES = 256
"""Pages (64 KiB each) the log may hold before SQLite checkpoints it into the database (16 MiB)."""
WAL_LIMIT_BYTES = 32 * 1024 * 1024
"""Size the log is truncated back to after a checkpoint (SQLite never shrinks it otherwise)."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    trajectory_id TEXT NOT NULL,
    span BLOB NOT NULL,
    resource TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX IF NOT EXISTS spans_by_trajectory ON spans (trajectory_id);
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY,
    finished_at REAL,
    conflicts TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS written_spans (
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    PRIMARY KEY (trace_id, span_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS outbox (
    exporter TEXT NOT NULL,
    trajectory_id TEXT NOT NULL,
    record TEXT NOT NULL,
    batch_id INTEGER,
    PRIMARY KEY (exporter, trajectory_id)
);
CREATE TABLE IF NOT EXISTS batches (
    batch_id INTEGER PRIMARY KEY AUTOINCREMENT,
    exporter TEXT NOT NULL,
    position TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt REAL NOT NULL DEFAULT 0
);
"""


@dataclass(frozen=True)
class StoredSpan:
    """A span as kept in the store: its OTLP bytes and its resource attributes."""

    trace_id: str
    span_id: str
    trajectory_id: str
    span: bytes
    resource: dict[str, Any]


@dataclass(frozen=True)
class Batch:
    """A batch of finished trajectories being exported."""

    batch_id: int
    exporter: str
    position: str
    attempts: int
    records: list[ExportedRecord]


class StoreError(StrandsTitoError, OSError):
    """The store cannot be opened or written (``--store`` on a read-only disk, a path through a file, ...)."""


class StoreInUse(StoreError):
    """Another collector has this store open."""


class Store:
    """Thread-safe access to the collector database (one connection, serialized by a lock).

    Args:
        path: Database file (created with its directory).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._owner = _lock_exclusively(Path(str(self.path) + ".lock"))
        except StoreInUse:
            raise
        except OSError as e:
            raise StoreError(f"cannot use the store {self.path}: {e} (choose another --store)") from e
        try:
            self._open()
        except sqlite3.Error as e:
            self._owner.close()
            raise StoreError(f"cannot write the store {self.path}: {e} (choose another --store)") from e
        self._lock = threading.Lock()

    def _open(self) -> None:
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # Spans are blobs of hundreds of KB: large pages keep them off long overflow-page chains (applies to a new
        # database; an existing one keeps its page size).
        self._db.execute("PRAGMA page_size=65536")
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable against a process crash (kill -9); FULL would also cover power loss.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        """Close the database and give the store up."""
        with self._lock:
            self._db.close()
            self._owner.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def size_bytes(self) -> int:
        """Bytes of data held: pages in use (free pages and the write-ahead log, bounded on its own, are not counted),
        so the figure falls again as the exporters catch up."""
        with self._lock:
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
            page_size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * page_size)

    def disk_bytes(self) -> int:
        """Bytes on disk: the database, its write-ahead log and shared-memory index."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            candidate = Path(str(self.path) + suffix)
            if candidate.exists():
                total += candidate.stat().st_size
        return total

    # -- ingest ------------------------------------------------------------------------------------------------------

    def finished(self, trajectory_ids: Iterable[str]) -> set[str]:
        """Which of these trajectories were already written."""
        ids = list(set(trajectory_ids))
        if not ids:
            return set()
        with self._lock:
            rows = self._db.execute(
                f"SELECT trajectory_id FROM trajectories WHERE finished_at IS NOT NULL AND trajectory_id IN "
                f"({','.join('?' * len(ids))})",
                ids,
            ).fetchall()
        return {r[0] for r in rows}

    def written(self, keys: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these ``(trace_id, span_id)`` keys belong to spans of trajectories already written."""
        found: set[tuple[str, str]] = set()
        with self._lock:
            for trace_id, span_id in set(keys):
                row = self._db.execute(
                    "SELECT 1 FROM written_spans WHERE trace_id = ? AND span_id = ?", (trace_id, span_id)
                ).fetchone()
                if row is not None:
                    found.add((trace_id, span_id))
        return found

    def add_spans(self, spans: list[StoredSpan], conflicts: dict[str, list[str]]) -> list[bool]:
        """Commit spans (duplicates ignored) and conflict notes; returns, per span, whether it was new."""
        new: list[bool] = []
        with self._transaction() as db:
            for span in spans:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO spans VALUES (?, ?, ?, ?, ?)",
                    (span.trace_id, span.span_id, span.trajectory_id, span.span, json.dumps(span.resource)),
                )
                new.append(cursor.rowcount == 1)
                db.execute("INSERT OR IGNORE INTO trajectories (trajectory_id) VALUES (?)", (span.trajectory_id,))
            for trajectory_id, notes in conflicts.items():
                db.execute("INSERT OR IGNORE INTO trajectories (trajectory_id) VALUES (?)", (trajectory_id,))
                row = db.execute("SELECT conflicts FROM trajectories WHERE trajectory_id = ?", (trajectory_id,))
                known = json.loads(row.fetchone()[0])
                db.execute(
                    "UPDATE trajectories SET conflicts = ? WHERE trajectory_id = ?",
                    (json.dumps(known + notes), trajectory_id),
                )
        return new

    def open_spans(self) -> Iterator[StoredSpan]:
        """Every stored span of trajectories not yet finished, in arrival order (used to rebuild after a restart)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id, span_id, trajectory_id, span, resource FROM spans ORDER BY rowid"
            ).fetchall()
        for trace_id, span_id, trajectory_id, span, resource in rows:
            yield StoredSpan(trace_id, span_id, trajectory_id, span, json.loads(resource))

    def spans_of(self, trajectory_id: str) -> list[StoredSpan]:
        """The stored spans of one open trajectory, in arrival order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id, span_id, trajectory_id, span, resource FROM spans WHERE trajectory_id = ? "
                "ORDER BY rowid",
                (trajectory_id,),
            ).fetchall()
        return [StoredSpan(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    def conflicts(self, trajectory_id: str) -> list[str]:
        """Conflicts noted for a trajectory."""
        with self._lock:
            row = self._db.execute(
                "SELECT conflicts FROM trajectories WHERE trajectory_id = ?", (trajectory_id,)
            ).fetchone()
        return list(json.loads(row[0])) if row else []

    def finish(self, trajectory_id: str, record: ExportedRecord, exporters: list[str]) -> None:
        """Move a finished trajectory from its spans to the outbox of every exporter, atomically."""
        text = json.dumps(record, separators=(",", ":"), allow_nan=False)
        with self._transaction() as db:
            for exporter in exporters:
                db.execute(
                    "INSERT OR IGNORE INTO outbox (exporter, trajectory_id, record) VALUES (?, ?, ?)",
                    (exporter, trajectory_id, text),
                )
            db.execute(
                "INSERT OR IGNORE INTO written_spans SELECT trace_id, span_id FROM spans WHERE trajectory_id = ?",
                (trajectory_id,),
            )
            db.execute("DELETE FROM spans WHERE trajectory_id = ?", (trajectory_id,))
            db.execute(
                "INSERT INTO trajectories (trajectory_id, finished_at) VALUES (?, ?) "
                "ON CONFLICT (trajectory_id) DO UPDATE SET finished_at = excluded.finished_at",
                (trajectory_id, time.time()),
            )

    # -- export ------------------------------------------------------------------------------------------------------

    def pending_batch(self, exporter: str) -> Batch | None:
        """A batch this exporter started and did not finish (after a crash or a failed write), if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT batch_id, position, attempts, next_attempt FROM batches WHERE exporter = ? "
                "ORDER BY batch_id LIMIT 1",
                (exporter,),
            ).fetchone()
            if row is None:
                return None
            records = self._db.execute(
                "SELECT record FROM outbox WHERE batch_id = ? ORDER BY rowid", (row[0],)
            ).fetchall()
        return Batch(row[0], exporter, row[1], row[2], [record_from_json(r[0]) for r in records])

    def retry_at(self, batch_id: int) -> float:
        """When a failed batch may be tried again."""
        with self._lock:
            row = self._db.execute("SELECT next_attempt FROM batches WHERE batch_id = ?", (batch_id,)).fetchone()
        return float(row[0]) if row else 0.0

    def start_batch(self, exporter: str, position: str, limit: int, max_bytes: int = BATCH_BYTES) -> Batch | None:
        """Assign up to ``limit`` waiting records, at most ``max_bytes`` of them (at least one), to a new batch that
        will be written at ``position``: a batch of long trajectories stays a bounded amount of memory."""
        with self._transaction() as db:
            sizes = db.execute(
                "SELECT rowid, length(record) FROM outbox WHERE exporter = ? AND batch_id IS NULL ORDER BY rowid "
                "LIMIT ?",
                (exporter, limit),
            ).fetchall()
            if not sizes:
                return None
            rowids: list[int] = []
            total = 0
            for rowid, size in sizes:
                if rowids and total + size > max_bytes:
                    break
                rowids.append(rowid)
                total += size
            batch_id = db.execute(
                "INSERT INTO batches (exporter, position) VALUES (?, ?)", (exporter, position)
            ).lastrowid
            assert batch_id is not None
            db.executemany("UPDATE outbox SET batch_id = ? WHERE rowid = ?", [(batch_id, r) for r in rowids])
            rows = db.execute("SELECT record FROM outbox WHERE batch_id = ? ORDER BY rowid", (batch_id,)).fetchall()
        return Batch(batch_id, exporter, position, 0, [record_from_json(r[0]) for r in rows])

    def batch_failed(self, batch_id: int, retry_in: float) -> None:
        """Count a failed attempt and set when to try again."""
        with self._transaction() as db:
            db.execute(
                "UPDATE batches SET attempts = attempts + 1, next_attempt = ? WHERE batch_id = ?",
                (time.time() + retry_in, batch_id),
            )

    def batch_done(self, batch_id: int) -> None:
        """The exporter has the batch durably: forget it."""
        with self._transaction() as db:
            db.execute("DELETE FROM outbox WHERE batch_id = ?", (batch_id,))
            db.execute("DELETE FROM batches WHERE batch_id = ?", (batch_id,))

    def queued(self, exporter: str, trajectory_id: str) -> bool:
        """Whether a finished trajectory still waits for (or is in a batch of) this exporter."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM outbox WHERE exporter = ? AND trajectory_id = ?", (exporter, trajectory_id)
            ).fetchone()
        return row is not None

    def waiting(self, exporter: str, limit: int) -> int:
        """How many finished trajectories wait for this exporter outside any batch, counting up to ``limit``."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM (SELECT 1 FROM outbox WHERE exporter = ? AND batch_id IS NULL LIMIT ?)",
                (exporter, limit),
            ).fetchone()
        return int(row[0])

    def queued_any(self, exporter: str) -> bool:
        """Whether finished trajectories wait for this exporter outside any batch."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM outbox WHERE exporter = ? AND batch_id IS NULL LIMIT 1", (exporter,)
            ).fetchone()
        return row is not None

    def counts(self) -> dict[str, int]:
        """Rows per table, for metrics."""
        with self._lock:
            return {
                "open_spans": self._db.execute("SELECT COUNT(*) FROM spans").fetchone()[0],
                "outbox": self._db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0],
                "finished": self._db.execute(
                    "SELECT COUNT(*) FROM trajectories WHERE finished_at IS NOT NULL"
                ).fetchone()[0],
            }


def _lock_exclusively(path: Path) -> IO[bytes]:
    """Hold an exclusive ``flock`` on ``path`` (released when the file is closed, or the process dies).

    Raises:
        StoreInUse: another process holds it.
    """
    handle = path.open("a+b")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        handle.seek(0)
        owner = handle.read(32).decode("ascii", "replace").strip() or "another process"
        handle.close()
        raise StoreInUse(f"the store {path.parent} is in use by another collector (pid {owner})") from e
    handle.truncate(0)
    handle.write(str(os.getpid()).encode())
    handle.flush()
    return handle
