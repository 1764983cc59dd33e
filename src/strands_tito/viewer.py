"""Looking at trajectories in the terminal (``strands-tito inspect``); the page is :mod:`strands_tito.html_view`.

Every viewer command fails in one line that says what to do (:class:`ViewerError`), never with a traceback: a missing
file, a line that is not a record, a tokenizer that is not on this machine, a port in use.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from strands_tito.errors import MissingDependencyError, StrandsTitoError
from strands_tito.records import ExportedRecord, record_from_row

GREEN, DIM, RED, RESET = "\033[32m", "\033[2m", "\033[31m", "\033[0m"
#: Entry-point group of tokenizers known by a short name (the testing package's offline ``qwen3`` and ``tiny``),
#: found by name so the product never imports the testing package (tests/test_architecture.py).
TOKENIZERS_GROUP = "strands_tito.tokenizers"
#: Where the collector's records come from, said in every error about an input file.
RECORDS_HINT = (
    "give the JSONL file (strands-tito collect --jsonl) or the Parquet directory (--parquet) the collector writes"
)


class ViewerError(StrandsTitoError, ValueError):
    """A viewer command cannot read its input or start; the message says what to do (printed as one line)."""


def load_tokenizer(name_or_path: str) -> Any:
    """A tokenizer by registered short name (``qwen3``, ``tiny``), from a local directory, or a hub id already in the
    local Hugging Face cache; never downloaded.

    Raises:
        ViewerError: ``name_or_path`` is none of these; the message says how to get it.
    """
    from importlib.metadata import entry_points

    for entry in entry_points(group=TOKENIZERS_GROUP, name=name_or_path):
        return entry.load()()
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    try:
        return AutoTokenizer.from_pretrained(str(path) if path.is_dir() else name_or_path, local_files_only=True)
    except (OSError, ValueError) as exc:
        names = ", ".join(sorted(e.name for e in entry_points(group=TOKENIZERS_GROUP)))
        if path.is_dir():
            why = f"{path} holds no tokenizer Hugging Face can load ({str(exc).splitlines()[0]})"
        elif path.exists() or name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
            why = "it is not a tokenizer directory"
        else:
            why = (
                "it looks like a Hugging Face Hub id, and the viewer never downloads: it is not in the local cache. "
                f"Download it first (hf download {name_or_path} --local-dir DIR) and pass --tokenizer DIR"
            )
        raise ViewerError(
            f"cannot load tokenizer {name_or_path!r}: {why}; --tokenizer takes one of {names} or a local tokenizer "
            "directory"
        ) from exc


class Decoder:
    """Token IDs to text with an optional tokenizer; without one, the IDs themselves."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def __call__(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(map(str, ids))
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))


def _runs(mask: Sequence[int]) -> list[list[int]]:
    """``(is_output, length)`` runs of a loss mask: a record's ``segments``."""
    runs: list[list[int]] = []
    for m in mask:
        if runs and runs[-1][0] == m:
            runs[-1][1] += 1
        else:
            runs.append([m, 1])
    return runs


def _segments(record: Mapping[str, Any]) -> Iterable[tuple[bool, list[int], list[float | None]]]:
    position = 0
    logprobs = record["logprobs"] or [None] * len(record["token_ids"])  # null: recorded without logprobs
    for is_output, length in record.get("segments") or _runs(record["loss_mask"]):
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


def checked_record(value: Any, where: str) -> ExportedRecord:
    """``value`` if it is a trajectory record the viewer can show (an object whose token arrays agree in length).

    Raises:
        ViewerError: it is not; the message names ``where`` (the file and line) and the fix.
    """
    problem = None
    if not isinstance(value, dict):
        problem = f"a JSON {type(value).__name__}, not an object"
    elif not isinstance(ids := value.get("token_ids"), list):
        problem = "no token_ids list"
    elif not isinstance(mask := value.get("loss_mask"), list) or len(mask) != len(ids):
        problem = f"loss_mask is not a list of {len(ids)} entries, one per token id"
    elif (logprobs := value.get("logprobs")) is not None and (
        not isinstance(logprobs, list) or len(logprobs) != len(ids)
    ):
        problem = f"logprobs is neither null nor a list of {len(ids)} entries"
    if problem is not None:
        raise ViewerError(f"{where} is not a trajectory record: {problem}; {RECORDS_HINT}, or remove that line")
    record: ExportedRecord = value
    return record


def parse_line(line: bytes | str, where: str) -> ExportedRecord:
    """One JSONL line as a record.

    Raises:
        ViewerError: the line is not JSON or not a record (:func:`checked_record`).
    """
    import orjson

    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ViewerError(f"{where} is not JSON ({e}); {RECORDS_HINT}, or remove that line") from e
    return checked_record(value, where)


def missing_input(path: Path) -> ViewerError | None:
    """The error for an input path that does not exist, or None."""
    if path.exists():
        return None
    return ViewerError(f"no such file or directory: {path}; {RECORDS_HINT}")


def read_records(path: Path) -> list[ExportedRecord]:
    """Records from a JSONL file or a Parquet file/directory written by the collector, as JSONL lines hold them.

    Raises:
        ViewerError: the path does not exist, or a line or row is not a record.
    """
    if (error := missing_input(path)) is not None:
        raise error
    if path.is_file() and path.suffix != ".parquet":
        with path.open("rb") as handle:
            return [parse_line(line, f"{path} line {n}") for n, line in enumerate(handle, 1) if line.strip()]
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError("Reading Parquet", "pyarrow", "parquet") from e
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as e:  # pyarrow's errors have no common base: ArrowInvalid, OSError, ...
        raise ViewerError(f"{path} is not a Parquet file or directory of parts ({e}); {RECORDS_HINT}") from e
    return [checked_record(record_from_row(row), f"{path} row {n}") for n, row in enumerate(rows)]


def run_names(paths: Sequence[Path]) -> list[str]:
    """What the page calls each run: the file's name, or its whole path where two names are the same."""
    names = [path.name or str(path) for path in paths]
    return names if len(set(names)) == len(names) else [str(path) for path in paths]


def _fail(prog: str, error: StrandsTitoError) -> int:
    print(f"{prog}: {error}", file=sys.stderr, flush=True)
    return 2


def inspect_main(argv: list[str]) -> int:
    """``strands-tito inspect FILE [--compare FILE] [--html OUT] [--tokenizer NAME]``; 2 and one line on stderr when
    it cannot (:class:`ViewerError`)."""
    prog = "strands-tito inspect"
    p = argparse.ArgumentParser(prog=prog, description="Show trajectories in the terminal, or write the viewer page.")
    p.add_argument("file", type=Path, help="JSONL file or Parquet file/directory")
    p.add_argument(
        "--html",
        type=Path,
        help="write the viewer as one self-contained page instead of printing (docs/viewer.md)",
    )
    p.add_argument("--compare", type=Path, help="a second run, shown side by side with the first on the page")
    p.add_argument("--tokenizer", help="decode tokens with this tokenizer ('qwen3', 'tiny' or a local path)")
    p.add_argument("--id", help="only the trajectory with this id")
    p.add_argument("--no-color", action="store_true")
    a = p.parse_args(argv)
    if a.compare is not None and a.html is None:
        p.error("--compare needs --html: two runs are compared on the page")
    try:
        paths = [a.file] if a.compare is None else [a.file, a.compare]
        runs = [[r for r in read_records(path) if a.id is None or r.get("trajectory_id") == a.id] for path in paths]
        decode = Decoder(load_tokenizer(a.tokenizer) if a.tokenizer else None)
        if a.html is not None:
            from strands_tito.html_view import write_page

            write_page(dict(zip(run_names(paths), runs, strict=True)), decode, a.html, tokenizer=a.tokenizer)
    except ViewerError as e:
        return _fail(prog, e)
    except OSError as e:  # the page cannot be written
        return _fail(prog, ViewerError(f"cannot write {a.html}: {e.strerror or e}; give --html a writable path"))
    records = [r for run in runs for r in run]
    complete = sum(1 for r in records if r.get("complete", True))
    counts = f"{len(records)} trajectories, {complete} complete, {len(records) - complete} incomplete"
    if a.html is not None:
        print(f"wrote {a.html}: {counts}")
        return 0
    color = sys.stdout.isatty() and not a.no_color
    for record in records:
        print(render_text(record, decode, color=color), end="\n\n")
    print(counts)
    return 0


def view_main(argv: list[str]) -> int:
    """``strands-tito view FILE [--compare FILE] [--tokenizer NAME] [--port N]``: serve the viewer page on
    127.0.0.1, with the records that reach the files while it runs; 2 and one line on stderr when it cannot start
    (:class:`ViewerError`)."""
    prog = "strands-tito view"
    p = argparse.ArgumentParser(prog=prog, description="Serve the trajectory viewer on 127.0.0.1.")
    p.add_argument("file", type=Path, help="JSONL file or Parquet file/directory")
    p.add_argument("--compare", type=Path, help="a second run, shown side by side with the first")
    p.add_argument("--tokenizer", help="decode tokens with this tokenizer ('qwen3', 'tiny' or a local path)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port; 0 picks a free one (default: %(default)s)")
    a = p.parse_args(argv)
    from strands_tito.html_view import serve

    try:
        paths = [a.file] if a.compare is None else [a.file, a.compare]
        tokenizer = load_tokenizer(a.tokenizer) if a.tokenizer else None
        server = serve(paths, Decoder(tokenizer), a.host, a.port, tokenizer=a.tokenizer)
    except ViewerError as e:
        return _fail(prog, e)
    print(f"{prog}: http://{a.host}:{server.server_port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
