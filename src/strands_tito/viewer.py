"""Looking at trajectories in the terminal (``strands-tito inspect``); the page is :mod:`strands_tito.html_view`."""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from strands_tito.errors import MissingDependencyError
from strands_tito.records import ExportedRecord, record_from_json, record_from_row

GREEN, DIM, RED, RESET = "\033[32m", "\033[2m", "\033[31m", "\033[0m"
#: Entry-point group of tokenizers known by a short name (the testing package's offline ``qwen3`` and ``tiny``),
#: found by name so the product never imports the testing package (tests/test_architecture.py).
TOKENIZERS_GROUP = "strands_tito.tokenizers"


def load_tokenizer(name_or_path: str) -> Any:
    """A tokenizer by registered short name (``qwen3``, ``tiny``) or from a local directory, never from the hub.

    Raises:
        ValueError: ``name_or_path`` is neither a registered name nor a loadable local tokenizer.
    """
    from importlib.metadata import entry_points

    for entry in entry_points(group=TOKENIZERS_GROUP, name=name_or_path):
        return entry.load()()
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    try:
        return AutoTokenizer.from_pretrained(str(path) if path.is_dir() else name_or_path, local_files_only=True)
    except (OSError, ValueError) as exc:
        names = sorted(e.name for e in entry_points(group=TOKENIZERS_GROUP))
        raise ValueError(f"Cannot load tokenizer {name_or_path!r}: expected one of {names} or a local path") from exc


class Decoder:
    """Token IDs to text with an optional tokenizer; without one, the IDs themselves."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def __call__(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


def _segments(record: Mapping[str, Any]) -> Iterable[tuple[bool, list[int], list[float | None]]]:
    position = 0
    logprobs = record["logprobs"] or [None] * len(record["token_ids"])  # null: recorded without logprobs
    for is_output, length in record["segments"]:
        yield (
            bool(is_output),
            record["token_ids"][position : position + length],
            logprobs[position : position + length],
        )
        position += length


def turn_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per-turn numbers: new prompt tokens, output tokens, finish reason, cached tokens, output logprob stats."""
    rows = []
    for turn in record.get("turns", []):
        start = turn["prompt_start"] + turn["prompt_length"]
        values = [v for v in (record["logprobs"] or [])[start : start + turn["output_length"]] if v is not None]
        rows.append(
            {
                "turn": turn["index"],
                "prompt": turn["prompt_length"],
                "output": turn["output_length"],
                "finish": turn["finish_reason"],
                "cached": turn.get("cached_tokens"),  # None: the server did not report it
                "mean_logprob": statistics.fmean(values) if values else math.nan,
                "min_logprob": min(values) if values else math.nan,
            }
        )
    return rows


def summary(record: Mapping[str, Any]) -> str:
    """One header line for a record."""
    output = sum(record["loss_mask"])
    state = "complete" if record.get("complete", True) else f"INCOMPLETE ({record.get('reason')})"
    diverged = next((c for c in record.get("prefix_report") or [] if not c.get("shares_prefix", True)), None)
    if diverged is not None:
        state += (
            f", PREFIX DIVERGED (call {diverged.get('index')} does not extend the previous call from position "
            f"{diverged.get('divergence')}; the tokens shown end there, {len(record.get('calls') or [])} calls in all)"
        )
    return (
        f"trajectory {record.get('trajectory_id')}  {state}  model={record.get('model_id')}  "
        f"reward={record.get('reward')}  tokens={len(record['token_ids'])} "
        f"(prompt {len(record['token_ids']) - output}, output {output})"
    )


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences from tool output, ...) shown as ``\\xNN``;
    newlines and tabs kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def render_text(record: Mapping[str, Any], decode: Decoder, color: bool = True) -> str:
    """Terminal view: output segments highlighted (they are what the loss trains on), then the turn table."""
    complete = record.get("complete", True)
    head = printable(summary(record))
    lines = [f"{RED}{head}{RESET}" if color and not complete else head]
    for is_output, ids, _ in _segments(record):
        tag = "output (loss_mask=1)" if is_output else "prompt (loss_mask=0)"
        text = printable(decode(ids))
        lines.append(f"--- {tag}, {len(ids)} tokens ---")
        lines.append(f"{GREEN}{text}{RESET}" if color and is_output else (f"{DIM}{text}{RESET}" if color else text))
    lines.append("turn  prompt+  output  finish  cached  mean logprob  min logprob")
    for row in turn_rows(record):
        cached = "-" if row["cached"] is None else row["cached"]
        lines.append(
            f"{row['turn']:>4}  {row['prompt']:>7}  {row['output']:>6}  {printable(str(row['finish'])):>6}"
            f"  {cached:>6}  {row['mean_logprob']:>12.3f}  {row['min_logprob']:>11.3f}"
        )
    return "\n".join(lines)


def read_records(path: Path) -> list[ExportedRecord]:
    """Records from a JSONL file or a Parquet file/directory written by the collector, as JSONL lines hold them."""
    if path.suffix == ".jsonl" or (path.is_file() and path.suffix != ".parquet"):
        return [record_from_json(line) for line in path.read_text().splitlines() if line.strip()]
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError("Reading Parquet", "pyarrow", "parquet") from e

    return [record_from_row(row) for row in pq.read_table(path).to_pylist()]


def inspect_main(argv: list[str]) -> int:
    """``strands-tito inspect FILE [--html OUT] [--tokenizer NAME]``."""
    p = argparse.ArgumentParser(prog="strands-tito inspect", description="Show trajectories in the terminal.")
    p.add_argument("file", type=Path, help="JSONL file or Parquet file/directory")
    p.add_argument(
        "--html",
        type=Path,
        help="write the viewer as one self-contained page (docs/viewer.md)",
    )
    p.add_argument("--tokenizer", help="decode tokens with this tokenizer ('qwen3', 'tiny' or a local path)")
    p.add_argument("--id", help="only the trajectory with this id")
    p.add_argument("--no-color", action="store_true")
    a = p.parse_args(argv)
    records = [r for r in read_records(a.file) if a.id is None or r.get("trajectory_id") == a.id]
    tokenizer = None
    if a.tokenizer:
        tokenizer = load_tokenizer(a.tokenizer)
    decode = Decoder(tokenizer)
    color = sys.stdout.isatty() and not a.no_color
    for record in records:
        print(render_text(record, decode, color=color), end="\n\n")
    complete = sum(1 for r in records if r.get("complete", True))
    print(f"{len(records)} trajectories, {complete} complete, {len(records) - complete} incomplete")
    if a.html is not None:
        from strands_tito.html_view import write_page

        write_page(records, decode, a.html)
        print(f"wrote {a.html}")
    return 0


def view_main(argv: list[str]) -> int:
    """``strands-tito view FILE [--tokenizer NAME] [--port N]``: serve the viewer page on 127.0.0.1."""
    p = argparse.ArgumentParser(prog="strands-tito view", description="Serve the trajectory viewer on 127.0.0.1.")
    p.add_argument("file", type=Path, help="JSONL file or Parquet file/directory")
    p.add_argument("--tokenizer", help="decode tokens with this tokenizer ('qwen3', 'tiny' or a local path)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port; 0 picks a free one (default: %(default)s)")
    a = p.parse_args(argv)
    from strands_tito.html_view import serve

    tokenizer = None
    if a.tokenizer:
        tokenizer = load_tokenizer(a.tokenizer)
    server = serve(a.file, Decoder(tokenizer), a.host, a.port)
    print(f"strands-tito view: http://{a.host}:{server.server_port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
