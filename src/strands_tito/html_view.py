"""The trajectory viewer: one page, written as a file (``strands-tito inspect FILE --html OUT``) or served
(``strands-tito view FILE``).

The page opens on an index of every trajectory (searchable, sortable by reward, length, completeness, model), with
the reward and length distributions drawn as inline SVG and the incomplete or prefix-diverged trajectories flagged
with the reason and the position. A trajectory is rendered only when it is opened: each token is its own element,
coloured by loss mask and shaded by logprob, with its id, position and logprob on hover; turn starts, tool calls and
special tokens are marked; reasoning (``<think>...</think>``) is set apart; a plot shows logprob over position.
Nothing is loaded from the network: styles, script and plots are in the page.

A written page embeds every trajectory (each parsed only when opened), which suits up to a few hundred long ones.
``view`` keeps only the index in memory and reads a trajectory's line from the file when the page asks for it, so
it opens thousands of long trajectories at once.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

from strands_tito.records import ExportedRecord
from strands_tito.viewer import Decoder, read_records

__all__ = ["TokenTexts", "TrajectoryIndex", "index_row", "page", "serve", "trajectory_payload", "write_page"]


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


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(known) if known else None


def index_row(number: int, record: Mapping[str, Any]) -> dict[str, Any]:
    """What the index shows of one record (small: no token data)."""
    mask = record.get("loss_mask") or []
    output_logprobs = [v for v, m in zip(record.get("logprobs") or [], mask, strict=False) if m]
    return {
        "n": number,
        "id": record.get("trajectory_id"),
        "model": record.get("model_id"),
        "reward": record.get("reward"),
        "tokens": len(record.get("token_ids") or []),
        "output": sum(mask),
        "turns": len(record.get("turns") or []) or len(record.get("calls") or []),
        "complete": bool(record.get("complete", True)),
        "reason": record.get("reason"),
        "diverged": _diverged(record),
        "finish": [t.get("finish_reason") for t in record.get("turns") or []],
        "mean_logprob": _mean(output_logprobs),
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


def page(rows: Sequence[dict[str, Any]], embedded: Sequence[dict[str, Any]] | None = None) -> str:
    """The page: the index rows, and every trajectory's payload when it is a file (None: fetched from the server)."""
    parts = [_asset("head.html"), f"<script type='application/json' id='index'>{_json_for_script(list(rows))}</script>"]
    for number, payload in enumerate(embedded or []):
        parts.append(f"<script type='application/json' id='t{number}'>{_json_for_script(payload)}</script>")
    parts.append(_asset("body.html"))
    return "".join(parts)


def write_page(records: Sequence[Mapping[str, Any]], decode: Decoder, out: Path) -> None:
    """Write a self-contained page with every record."""
    texts = TokenTexts(decode)
    rows = [index_row(n, r) for n, r in enumerate(records)]
    out.write_text(page(rows, [trajectory_payload(r, texts) for r in records]), encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as handle:
        offset = 0
        for line in handle:
            if line.strip():
                yield offset, line
            offset += len(line)


class TrajectoryIndex:
    """The index rows of a file, and where each record is, so that one can be read again when it is opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = []
        self.offsets: list[int] = []
        self.records: list[ExportedRecord] | None = None
        if path.is_file() and path.suffix != ".parquet":
            for offset, line in _lines(path):
                self.rows.append(index_row(len(self.rows), orjson.loads(line)))
                self.offsets.append(offset)
        else:  # Parquet: columnar, read whole
            self.records = read_records(path)
            self.rows = [index_row(n, r) for n, r in enumerate(self.records)]

    def record(self, number: int) -> Mapping[str, Any]:
        """Record ``number`` of the file (read again from its line for JSONL)."""
        if self.records is not None:
            return self.records[number]
        with self.path.open("rb") as handle:
            handle.seek(self.offsets[number])
            loaded: dict[str, Any] = orjson.loads(handle.readline())
            return loaded


def serve(path: Path, decode: Decoder, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for the page over ``path`` (call ``serve_forever``); ``GET /`` is the page, ``GET /t/N`` a
    trajectory's payload."""
    index = TrajectoryIndex(path)
    texts = TokenTexts(decode)
    html = page(index.rows).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                self._send(200, "text/html; charset=utf-8", html)
                return
            if self.path.startswith("/t/") and self.path[3:].isdigit() and int(self.path[3:]) < len(index.rows):
                payload = trajectory_payload(index.record(int(self.path[3:])), texts)
                self._send(200, "application/json", orjson.dumps(payload))
                return
            self._send(404, "text/plain", b"not found")

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)
