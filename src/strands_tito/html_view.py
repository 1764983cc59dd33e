"""The trajectory viewer: one page, written as a file (``strands-tito inspect FILE --html OUT``) or served
(``strands-tito view FILE``), for one run or two side by side (``--compare FILE``).

The page opens on an index of every trajectory, filtered by reward, finish reason, tool errors, agent, episode,
completeness and the tokens' text, searchable and sortable, with each run's reward and length distributions and
per-agent table side by side, and the incomplete or prefix-diverged trajectories flagged with the reason and the
position. A trajectory is rendered only when it is opened: each token is its own element, coloured by loss mask and
shaded by logprob, with a card on hover (id, text, logprob, mask, turn); turn starts, tool calls and special tokens
are marked; reasoning (``<think>...</think>``) is set apart; a plot shows logprob over position, one line per turn's
output. Nothing is loaded from the network: styles, script and plots are in the page.

A written page embeds every trajectory (each parsed only when opened), which suits up to a few hundred long ones.
``view`` keeps only the index in memory and reads a trajectory's line from the file when the page asks for it, so
it opens thousands of long trajectories at once; records that reach the files while it runs (JSONL lines, Parquet
parts) join the page without a restart.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import statistics
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import compress
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import orjson

from strands_tito.records import ExportedRecord
from strands_tito.viewer import Decoder, ViewerError, missing_input, parse_line, read_records, run_names

__all__ = [
    "RunIndex",
    "TokenTexts",
    "TrajectoryIndex",
    "index_row",
    "page",
    "serve",
    "trajectory_payload",
    "write_page",
]

#: How often the served page asks for records that reached the files since (milliseconds).
POLL_MS = 2000


class TokenTexts:
    """Each token id's own text (decoded alone, special tokens kept), cached per id."""

    def __init__(self, decode: Decoder) -> None:
        self._decode = decode
        self._cache: dict[int, str] = {}

    def __call__(self, ids: Sequence[int]) -> list[str]:
        cache = self._cache
        missing = [i for i in set(ids) if i not in cache]
        tokenizer = self._decode.tokenizer
        if tokenizer is None:
            texts = [f"[{i}]" for i in missing]
        else:  # one call into the tokenizer for all of them
            texts = tokenizer.batch_decode([[i] for i in missing], skip_special_tokens=False)
        cache.update(zip(missing, texts, strict=True))
        return [cache[i] for i in ids]


def _diverged(record: Mapping[str, Any]) -> dict[str, Any] | None:
    for check in record.get("prefix_report") or []:
        if not check.get("shares_prefix", True):
            return {"call": check.get("index"), "position": check.get("divergence")}
    return None


def _output_mean(logprobs: Sequence[float | None], mask: Sequence[int]) -> float | None:
    """Mean logprob of the generated tokens, the non-finite left out; C-level passes over 32k tokens, not a Python
    loop (the index pass over a whole run is bound by this and by JSON parsing)."""
    chosen = list(compress(logprobs, mask))
    values = cast(list[float], chosen if None not in chosen else [v for v in chosen if v is not None])
    if not values:
        return None
    total = math.fsum(values)
    if math.isfinite(total):  # a NaN or infinity anywhere would make the sum non-finite
        return total / len(values)
    known = [v for v in values if math.isfinite(v)]
    return statistics.fmean(known) if known else None


def index_row(number: int, record: Mapping[str, Any], run: int = 0) -> dict[str, Any]:
    """What the index shows of one record (small: no token data); ``run``: which run of the page it belongs to."""
    mask = record.get("loss_mask") or []
    turns, calls = record.get("turns") or [], record.get("calls") or []
    return {
        "n": number,
        "run": run,
        "id": record.get("trajectory_id"),
        "model": record.get("model_id"),
        "reward": record.get("reward"),
        "tokens": len(record.get("token_ids") or []),
        "output": sum(mask),
        "turns": len(turns) or len(calls),
        "complete": bool(record.get("complete", True)),
        "reason": record.get("reason"),
        "diverged": _diverged(record),
        "finish": [t.get("finish_reason") for t in turns] or [c.get("finish_reason") for c in calls],
        "tool_errors": len(record.get("tool_parse_errors") or []),
        "mean_logprob": _output_mean(record.get("logprobs") or [], mask),
        "episode": record.get("episode_id"),
        "agent": record.get("agent_name"),
        # What `strands-tito verify --out` added (docs/trainers.md): its verdict and mean |recomputed - recorded|.
        "verify": (record.get("verify") or {}).get("verdict"),
        "verify_diff": (record.get("verify") or {}).get("mean_abs_diff"),
    }


def trajectory_payload(record: Mapping[str, Any], texts: TokenTexts) -> dict[str, Any]:
    """What the page needs to render one trajectory."""
    ids = list(record.get("token_ids") or [])
    keys = (
        "trajectory_id", "model_id", "complete", "reason", "reward", "rewards", "episode_id", "sample_index",
        "parent_trajectory_id", "agent_id", "agent_name", "turns", "prefix_report", "prefix_consistent",
        "merged_calls", "tool_parse_errors", "resource",
    )  # fmt: skip
    return {
        **{key: record.get(key) for key in keys},
        "ids": ids,
        "texts": texts(ids),
        "mask": list(record.get("loss_mask") or []),
        "logprobs": [None if v is None or not math.isfinite(v) else round(v, 4) for v in record.get("logprobs") or []],
        "diverged": _diverged(record),
        "recomputed": [None if v is None else round(v, 4) for v in record["recomputed_logprobs"]]
        if record.get("recomputed_logprobs")
        else None,
    }


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its ``<script>`` element early."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\!--")


@functools.cache
def _asset(name: str) -> str:
    """The page's markup, styles and script (``strands_tito/data/viewer/``)."""
    return (importlib.resources.files("strands_tito") / "data" / "viewer" / name).read_text(encoding="utf-8")


def page(
    rows: Sequence[dict[str, Any]],
    embedded: Sequence[dict[str, Any]] | None = None,
    *,
    runs: Sequence[str] = ("",),
    tokenizer: str | None = None,
    live: bool = False,
) -> str:
    """The page: the index rows, and every trajectory's payload when it is a file (None: fetched from the server).

    ``runs`` names each run (row ``run`` indexes it); ``tokenizer`` is what decoded the tokens (None: the page says
    why it shows bare ids); ``live``: the page asks the server for new records every :data:`POLL_MS`.
    """
    meta = {"runs": list(runs), "tokenizer": tokenizer, "live": live, "poll_ms": POLL_MS}
    parts = [
        _asset("head.html"),
        f"<script type='application/json' id='meta'>{_json_for_script(meta)}</script>",
        f"<script type='application/json' id='index'>{_json_for_script(list(rows))}</script>",
    ]
    for number, payload in enumerate(embedded or []):
        parts.append(f"<script type='application/json' id='t{number}'>{_json_for_script(payload)}</script>")
    parts.append(_asset("body.html"))
    return "".join(parts)


def write_page(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], decode: Decoder, out: Path, *, tokenizer: str | None = None
) -> None:
    """Write a self-contained page with every record of each run (``{name: records}``, one or two runs)."""
    texts = TokenTexts(decode)
    rows: list[dict[str, Any]] = []
    payloads: list[dict[str, Any]] = []
    for run, records in enumerate(runs.values()):
        for record in records:
            rows.append(index_row(len(rows), record, run))
            payloads.append(trajectory_payload(record, texts))
    out.write_text(page(rows, payloads, runs=list(runs), tokenizer=tokenizer), encoding="utf-8")


class TrajectoryIndex:
    """The index rows of one run's file, where each record is (so that one can be read again when it is opened),
    and what has reached the file since (:meth:`refresh`).

    A JSONL file is read line by line, up to its last complete line (a line still being written waits for its
    newline); a Parquet directory part by part (the collector renames each part into place whole); a Parquet file
    once.

    Raises:
        ViewerError: the path does not exist, or a line or row is not a record.
    """

    def __init__(self, path: Path, run: int = 0) -> None:
        if (error := missing_input(path)) is not None:
            raise error
        self.path, self.run = path, run
        self.rows: list[dict[str, Any]] = []
        self.offsets: list[int] = []
        self.records: list[ExportedRecord] | None = None
        self._jsonl = path.is_file() and path.suffix != ".parquet"
        self._end = 0  # JSONL: bytes read up to the end of the last complete line
        self._lines = 0
        self._parts: set[Path] = set()
        self.refresh(strict=True)

    def refresh(self, strict: bool = False) -> list[dict[str, Any]]:
        """Read what reached the file since the last call; its new rows. ``strict``: a line that is not a record
        raises :class:`ViewerError`; else it is skipped with one line on stderr (the page keeps serving)."""
        start = len(self.rows)
        if self._jsonl:
            self._read_lines(strict)
        elif self.records is None or self.path.is_dir():
            self._read_parts(strict)
        return self.rows[start:]

    def _read_lines(self, strict: bool) -> None:
        try:
            handle = self.path.open("rb")
        except OSError as e:
            if strict:
                raise ViewerError(f"cannot read {self.path}: {e.strerror or e}") from e
            return
        with handle:
            handle.seek(self._end)
            for line in handle:
                if not line.endswith(b"\n"):
                    break  # still being written
                self._lines += 1
                offset, self._end = self._end, self._end + len(line)
                if not line.strip():
                    continue
                try:
                    record = parse_line(line, f"{self.path} line {self._lines}")
                except ViewerError as e:
                    if strict:
                        raise
                    print(f"strands-tito view: skipped: {e}", file=sys.stderr, flush=True)
                    continue
                self.rows.append(index_row(len(self.rows), record, self.run))
                self.offsets.append(offset)

    def _read_parts(self, strict: bool) -> None:
        records = self.records if self.records is not None else []
        parts = sorted(self.path.glob("*.parquet")) if self.path.is_dir() else [self.path]
        for part in parts:
            if part in self._parts:
                continue
            try:
                new = read_records(part)
            except ViewerError as e:
                if strict:
                    raise
                print(f"strands-tito view: skipped: {e}", file=sys.stderr, flush=True)
                new = []
            self._parts.add(part)
            for record in new:
                self.rows.append(index_row(len(records), record, self.run))
                records.append(record)
        self.records = records

    def record(self, number: int) -> Mapping[str, Any]:
        """Record ``number`` of the file (read again from its line for JSONL)."""
        if self.records is not None:
            return self.records[number]
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[number])
            loaded: dict[str, Any] = orjson.loads(handle.readline())
            return loaded

    def each_record(self) -> Iterator[tuple[int, Mapping[str, Any]]]:
        """Every record indexed so far, in order, with its number (JSONL: one sequential read of the file)."""
        if self.records is not None:
            yield from enumerate(self.records[: len(self.rows)])
            return
        with self.path.open("rb") as handle:
            for number, offset in enumerate(self.offsets):
                handle.seek(offset)
                yield number, orjson.loads(handle.readline())


class RunIndex:
    """One or two runs' indexes as the page numbers them: row ``n`` counts across runs in the order rows arrived."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.runs = [TrajectoryIndex(path, run) for run, path in enumerate(paths)]
        self.rows: list[dict[str, Any]] = []
        self._where: list[tuple[TrajectoryIndex, int]] = []
        self._lock = threading.Lock()
        for index in self.runs:
            self._add(index, index.rows)

    def _add(self, index: TrajectoryIndex, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            self._where.append((index, row["n"]))
            self.rows.append({**row, "n": len(self.rows)})

    def refresh(self) -> None:
        """Take in what reached the files since."""
        with self._lock:
            for index in self.runs:
                self._add(index, index.refresh())

    def record(self, number: int) -> Mapping[str, Any]:
        """Row ``number``'s record."""
        index, local = self._where[number]
        return index.record(local)

    def search(self, text: str, texts: TokenTexts) -> list[int]:
        """The rows whose tokens, decoded, contain ``text`` (ignoring case)."""
        needle = text.casefold()
        found = []
        with self._lock:
            known = {(id(index), local): n for n, (index, local) in enumerate(self._where)}
        for index in self.runs:
            for local, record in index.each_record():
                n = known.get((id(index), local))
                if n is not None and needle in "".join(texts(record.get("token_ids") or [])).casefold():
                    found.append(n)
        return sorted(found)


def serve(
    paths: Path | Sequence[Path],
    decode: Decoder,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    tokenizer: str | None = None,
) -> ThreadingHTTPServer:
    """A server for the page over one run's file or two (call ``serve_forever``): ``GET /`` is the page,
    ``GET /t/N`` a trajectory's payload, ``GET /rows?from=K`` the rows from ``K`` on (what reached the files since
    is read first), ``GET /search?q=TEXT`` the rows whose decoded tokens contain ``TEXT``.

    Raises:
        ViewerError: a file is missing or holds a line that is not a record, or the port cannot be bound.
    """
    names = [paths] if isinstance(paths, Path) else list(paths)
    index = RunIndex(names)
    texts = TokenTexts(decode)
    runs = run_names(names)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path == "/":
                index.refresh()
                html = page(index.rows, runs=runs, tokenizer=tokenizer, live=True)
                self._send(200, "text/html; charset=utf-8", html.encode())
            elif url.path.startswith("/t/") and url.path[3:].isdigit() and int(url.path[3:]) < len(index.rows):
                payload = trajectory_payload(index.record(int(url.path[3:])), texts)
                self._send(200, "application/json", orjson.dumps(payload))
            elif url.path == "/rows":
                start = query.get("from", ["0"])[0]
                index.refresh()
                rows = index.rows[int(start) :] if start.isdigit() else []
                self._send(200, "application/json", orjson.dumps(rows))
            elif url.path == "/search" and query.get("q", [""])[0]:
                matches = index.search(query["q"][0], texts)
                self._send(200, "application/json", orjson.dumps({"matches": matches}))
            else:
                self._send(404, "text/plain", b"not found")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise ViewerError(
            f"cannot listen on {host}:{port}: {e.strerror or e}; pick another port with --port N (--port 0 picks a "
            "free one)"
        ) from e
