"""``strands-tito verify``: does a trainer, recomputing each generated token's log-probability, get what was recorded?

An off-by-one loss mask, a retokenized token, a prompt rebuilt differently or inference kernels that disagree with
training kernels all show up here and nowhere else. For every record it runs the model (a local Hugging Face
directory) over the recorded token ids, compares the log-probability of every loss-masked token with the recorded one
and reports tokens compared, mean and max ``|Δ|``, the share beyond a threshold, the worst positions with their text,
and a verdict:

* ``noise``: the mean ``|Δ|`` is within ``--tolerance`` (bf16 serving against a float32 forward: a few hundredths);
* ``mismatch``: aligned (the recorded values fit these positions far better than the next ones) but beyond noise:
  other weights, dtype or kernels, or a prompt the trainer would rebuild differently;
* ``misaligned``: the shifted-mask control (each recorded logprob against the recomputed one a position later) is
  within a factor 2 of the aligned difference: the mask, the token ids or the logprobs are not where they belong,
  or the model is far from the one that served (one Adam step at lr 1e-4 on SmolLM2-135M already reads so).

The forward pass runs in :mod:`strands_tito.verify_worker`, in ``--python`` (default: this interpreter), which needs
only torch and transformers. Records stream through one at a time (JSONL lines, Parquet row batches); ``--out``
writes each with its per-token ``recomputed_logprobs``, ``importance_weights`` and their truncated form, and a
``verify`` summary, which the viewer shows (docs/trainers.md, docs/viewer.md).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from strands_tito.errors import MissingDependencyError, StrandsTitoError
from strands_tito.settings import get_settings

__all__ = [
    "Comparison",
    "Recomputer",
    "Summary",
    "VerifyError",
    "compare",
    "importance_weights",
    "iter_records",
    "verify_main",
]

#: Verdicts, from best to worst.
VERDICTS = ("noise", "mismatch", "misaligned")
#: The shifted control must be at least this many times the aligned mean |Δ| for the records to count as aligned.
ALIGNMENT_FACTOR = 2.0
#: The worker reads the model from disk only, and keeps quiet on stderr (no progress bars) unless it fails.
WORKER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
}


class VerifyError(StrandsTitoError):
    """The input, the model or the recomputing Python cannot be used; the message says which and why."""


@dataclass(frozen=True)
class ForwardPass:
    """One forward pass: token ids and the positions whose recorded logprob is compared (call records have one per
    call; ``offset`` maps a position back into the record's per-token arrays, -1: none)."""

    ids: list[int]
    positions: list[int]
    recorded: list[float]
    offset: int
    call: int | None = None


@dataclass
class Comparison:
    """One trajectory's comparison (or the running total over many)."""

    tokens: int = 0
    sum_abs: float = 0.0
    max_abs: float = 0.0
    beyond: int = 0
    shifted_tokens: int = 0
    shifted_sum_abs: float = 0.0
    worst: list[tuple[float, int, int | None, float, float]] = field(default_factory=list)
    """``(|Δ|, position, call, recorded, recomputed)``, largest first."""

    @property
    def mean_abs(self) -> float:
        """Mean ``|recomputed - recorded|`` over the compared tokens."""
        return self.sum_abs / self.tokens if self.tokens else 0.0

    @property
    def shifted_mean_abs(self) -> float | None:
        """The shifted-mask control: mean ``|recomputed[p + 1] - recorded[p]|`` (None: no pairs)."""
        return self.shifted_sum_abs / self.shifted_tokens if self.shifted_tokens else None

    def verdict(self, tolerance: float) -> str | None:
        """``noise``, ``mismatch`` or ``misaligned`` (None: nothing compared)."""
        if not self.tokens:
            return None
        shifted = self.shifted_mean_abs
        if shifted is not None and shifted < ALIGNMENT_FACTOR * self.mean_abs:
            return "misaligned"
        return "noise" if self.mean_abs <= tolerance else "mismatch"

    def add(self, other: Comparison, keep: int) -> None:
        """Fold ``other`` in, keeping the ``keep`` worst positions."""
        self.tokens += other.tokens
        self.sum_abs += other.sum_abs
        self.max_abs = max(self.max_abs, other.max_abs)
        self.beyond += other.beyond
        self.shifted_tokens += other.shifted_tokens
        self.shifted_sum_abs += other.shifted_sum_abs
        self.worst = heapq.nlargest(keep, [*self.worst, *other.worst], key=lambda w: w[0])

    def summary(self, threshold: float, tolerance: float) -> dict[str, Any]:
        """The numbers as plain JSON (no per-token data)."""
        shifted = self.shifted_mean_abs
        return {
            "tokens": self.tokens,
            "mean_abs_diff": round(self.mean_abs, 6),
            "max_abs_diff": round(self.max_abs, 6),
            "beyond_threshold": self.beyond,
            "share_beyond_threshold": round(self.beyond / self.tokens, 6) if self.tokens else 0.0,
            "shifted_mean_abs_diff": None if shifted is None else round(shifted, 6),
            "verdict": self.verdict(tolerance),
        }


def compare(
    sequence: ForwardPass, recomputed: Mapping[int, float], threshold: float, keep: int
) -> tuple[Comparison, list[float]]:
    """Compare one sequence's recorded logprobs with the recomputed ones (by position); also the recomputed values
    at the compared positions, in order."""
    result = Comparison()
    values = [recomputed[p] for p in sequence.positions]
    worst: list[tuple[float, int, int | None, float, float]] = []
    for position, recorded, value in zip(sequence.positions, sequence.recorded, values, strict=True):
        diff = abs(value - recorded)
        result.tokens += 1
        result.sum_abs += diff
        result.max_abs = max(result.max_abs, diff)
        result.beyond += diff > threshold
        worst.append((diff, position, sequence.call, recorded, value))
        if position + 1 in recomputed:
            result.shifted_tokens += 1
            result.shifted_sum_abs += abs(recomputed[position + 1] - recorded)
    result.worst = heapq.nlargest(keep, worst, key=lambda w: w[0])
    return result, values


def importance_weights(recorded: float, recomputed: float, cap: float) -> tuple[float, float]:
    """The per-token importance ratio ``exp(recomputed - recorded)`` (trainer over rollout policy) and its truncated
    form ``min(ratio, cap)`` (truncated importance sampling)."""
    ratio = math.exp(min(recomputed - recorded, 700.0))  # past exp's float range it is capped anyway
    return ratio, min(ratio, cap)


def sequences_of(record: Mapping[str, Any], number: int) -> list[ForwardPass]:
    """What to recompute in one record: the whole token sequence of a turn record, each call of a call record."""
    calls = record.get("calls") or []
    if calls:
        out = []
        for k, call in enumerate(calls):
            prompt, output, logprobs = call.get("prompt_ids"), call.get("output_ids"), call.get("output_logprobs")
            if not isinstance(prompt, list) or not isinstance(output, list):
                raise VerifyError(f"record {number}: call {k} has no prompt_ids/output_ids")
            if logprobs is None:
                continue
            start = len(prompt)
            kept = [(start + i, lp) for i, lp in enumerate(logprobs) if lp is not None and start + i >= 1]
            out.append(ForwardPass(prompt + output, [p for p, _ in kept], [lp for _, lp in kept], -1, k))
        return out
    ids, mask, logprobs = record.get("token_ids"), record.get("loss_mask"), record.get("logprobs")
    if not isinstance(ids, list) or not isinstance(mask, list) or len(mask) != len(ids):
        raise VerifyError(f"record {number} is not a trajectory record: it needs token_ids and a loss_mask as long")
    if logprobs is None:
        return []
    if not isinstance(logprobs, list) or len(logprobs) != len(ids):
        raise VerifyError(f"record {number}: logprobs must be null or one per token ({len(ids)})")
    kept = [(p, lp) for p, (m, lp) in enumerate(zip(mask, logprobs, strict=True)) if m and lp is not None and p >= 1]
    return [ForwardPass(ids, [p for p, _ in kept], [lp for _, lp in kept], 0)]


# -- reading ---------------------------------------------------------------------------------------------------------


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records one at a time from a JSONL file or a Parquet file/directory (the collector's output), as JSONL lines
    hold them: memory stays bounded by one record (one Parquet row batch).

    Raises:
        VerifyError: the file is missing, or a line is not a JSON object.
    """
    if not path.exists():
        raise VerifyError(f"{path}: no such file or directory")
    if path.is_file() and path.suffix != ".parquet":
        with path.open("rb") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise VerifyError(f"{path}:{number}: not JSON ({e})") from None
                if not isinstance(record, dict):
                    raise VerifyError(f"{path}:{number}: not a JSON object")
                yield record
        return
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError("Reading Parquet", "pyarrow", "parquet") from e
    from strands_tito.records import record_from_row

    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    for part in files:
        for batch in pq.ParquetFile(part).iter_batches(batch_size=64):
            for row in batch.to_pylist():
                yield dict(record_from_row(row))


# -- the recomputing process -----------------------------------------------------------------------------------------


class Recomputer:
    """The model in a :mod:`strands_tito.verify_worker` process (``python``: one with torch and transformers)."""

    def __init__(self, python: str, model: Path, device: str = "auto", dtype: str = "float32") -> None:
        if not (model / "config.json").is_file():
            raise VerifyError(f"{model} is not a Hugging Face model directory (no config.json)")
        script = Path(__file__).with_name("verify_worker.py")
        try:
            self._process = subprocess.Popen(
                [python, str(script), str(model), device, dtype],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, **WORKER_ENV},
            )
        except OSError as e:
            raise VerifyError(f"cannot run {python}: {e.strerror}") from None
        ready = self._read()
        self.vocab: int = ready["vocab"]
        self.device: str = ready["device"]

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            raise VerifyError(f"the recomputing Python exited with {code} (its error is above)")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise VerifyError(message["error"])
        return message.get("ready") or message

    def logprobs(self, ids: Sequence[int], positions: Sequence[int]) -> dict[int, float]:
        """The model's logprob of ``ids[p]`` after ``ids[:p]`` at each of ``positions``."""
        if not positions:
            return {}
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"ids": list(ids), "positions": list(positions)}) + "\n")
        self._process.stdin.flush()
        values: list[float] = self._read()["logprobs"]
        return dict(zip(positions, values, strict=True))

    def decode(self, pieces: Sequence[Sequence[int]]) -> list[str]:
        """Each list of ids as text (the model's tokenizer, special tokens kept)."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"decode": [list(ids) for ids in pieces]}) + "\n")
        self._process.stdin.flush()
        texts: list[str] = self._read()["texts"]
        return texts

    def close(self) -> None:
        """End the process."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


# -- the command -----------------------------------------------------------------------------------------------------


@dataclass
class Summary:
    """What one run found: per trajectory, the verdicts counted, and the total."""

    total: Comparison = field(default_factory=Comparison)
    trajectories: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: dict.fromkeys((*VERDICTS, "none"), 0))
    rows: list[dict[str, Any]] = field(default_factory=list)


def _annotate(
    record: dict[str, Any], sequences: list[ForwardPass], values: list[list[float]], cap: float, summary: dict[str, Any]
) -> None:
    """Put the per-token recomputed logprobs and importance weights on ``record`` (aligned with its token ids, or
    with each call's output ids), and the summary."""
    if sequences and sequences[0].call is not None:
        for sequence, recomputed in zip(sequences, values, strict=True):
            call = record["calls"][sequence.call]
            start = len(call["prompt_ids"])
            per_token: list[float | None] = [None] * len(call["output_ids"])
            for position, value in zip(sequence.positions, recomputed, strict=True):
                per_token[position - start] = value
            call["recomputed_logprobs"] = per_token
    else:
        length = len(record.get("token_ids") or [])
        per_token = [None] * length
        ratios: list[float | None] = [None] * length
        truncated: list[float | None] = [None] * length
        for sequence, recomputed in zip(sequences, values, strict=True):
            for position, recorded, value in zip(sequence.positions, sequence.recorded, recomputed, strict=True):
                per_token[position] = value
                ratios[position], truncated[position] = importance_weights(recorded, value, cap)
        record["recomputed_logprobs"] = per_token
        record["importance_weights"] = ratios
        record["truncated_importance_weights"] = truncated
    record["verify"] = summary


def _worst_lines(comparison: Comparison, ids_of: Any, recomputer: Recomputer, indent: str) -> list[str]:
    """One line per worst position: where, both values, and the text before it and the token itself."""
    pieces: list[list[int]] = []
    for _, position, call, _, _ in comparison.worst:
        ids = ids_of(call)
        pieces += [ids[max(0, position - 8) : position], ids[position : position + 1]]
    texts = recomputer.decode(pieces) if pieces else []
    lines = []
    for k, (diff, position, call, recorded, value) in enumerate(comparison.worst):
        where = f"position {position}" if call is None else f"call {call} position {position}"
        text = f"{texts[2 * k][-30:]!r} → {texts[2 * k + 1]!r}"
        lines.append(f"{indent}|Δ| {diff:.4f} at {where}: recorded {recorded:.4f}, recomputed {value:.4f}  {text}")
    return lines


def run(
    records: Iterator[dict[str, Any]],
    recomputer: Recomputer,
    *,
    threshold: float,
    tolerance: float,
    cap: float,
    keep: int,
    out: IO[str] | None = None,
    report: IO[str] = sys.stdout,
    progress: IO[str] | None = None,
) -> Summary:
    """Verify ``records`` one at a time, printing a block per trajectory to ``report``; the summary."""
    found = Summary()
    started = time.monotonic()
    for number, record in enumerate(records):
        sequences = sequences_of(record, number)
        comparison, values = Comparison(), []
        for sequence in sequences:
            if any(not 0 <= i < recomputer.vocab for i in sequence.ids):
                raise VerifyError(
                    f"record {number}: token ids outside the model's vocabulary of {recomputer.vocab}: "
                    "is this the model that served it?"
                )
            wanted = sorted({*sequence.positions, *(p + 1 for p in sequence.positions if p + 1 < len(sequence.ids))})
            recomputed = recomputer.logprobs(sequence.ids, wanted)
            part, at_positions = compare(sequence, recomputed, threshold, keep)
            comparison.add(part, keep)
            values.append(at_positions)
        summary = comparison.summary(threshold, tolerance)
        found.trajectories += 1
        found.verdicts[summary["verdict"] or "none"] += 1
        found.total.add(comparison, keep)
        trajectory_id = record.get("trajectory_id")
        found.rows.append({"trajectory_id": trajectory_id, **summary})
        shifted = summary["shifted_mean_abs_diff"]
        print(
            f"{trajectory_id}: {summary['verdict'] or 'nothing to compare (no logprobs recorded)'}  "
            f"tokens {comparison.tokens}  mean |Δ| {comparison.mean_abs:.4f}  max |Δ| {comparison.max_abs:.4f}  "
            f"beyond {threshold:g}: {summary['share_beyond_threshold']:.2%}  shifted-mask control "
            f"{'-' if shifted is None else f'{shifted:.4f}'}",
            file=report,
        )

        def ids_of(call: int | None, record: dict[str, Any] = record) -> list[int] | None:
            if call is None:
                return list(record.get("token_ids") or [])
            c = record["calls"][call]
            return [*c["prompt_ids"], *c["output_ids"]]

        report.writelines(line + "\n" for line in _worst_lines(comparison, ids_of, recomputer, "    "))
        if out is not None:
            _annotate(record, sequences, values, cap, summary)
            out.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
        if progress is not None:
            rate = found.total.tokens / max(time.monotonic() - started, 1e-9)
            progress.write(f"\rverify: {found.trajectories} trajectories, {found.total.tokens} tokens ({rate:.0f}/s)")
            progress.flush()
    if progress is not None:
        progress.write("\n")
    return found


def verify_main(argv: list[str]) -> int:
    """``strands-tito verify FILE --model DIR``: exit 0 when every trajectory agrees within noise, 1 when one does
    not, 2 on bad input."""
    p = argparse.ArgumentParser(
        prog="strands-tito verify",
        description="Recompute each generated token's logprob with the model and compare it with the recorded one.",
    )
    p.add_argument("file", type=Path, help="JSONL file, or Parquet file/directory (the collector's output)")
    p.add_argument("--model", type=Path, required=True, help="local Hugging Face model directory (the policy)")
    p.add_argument(
        "--python",
        default=get_settings().torch_python or sys.executable,
        help="a Python with torch and transformers to run the model (default: $STRANDS_TITO_TORCH_PYTHON, else this)",
    )
    p.add_argument("--device", default="auto", help="torch device (default: cuda when there is one, else cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--threshold", type=float, default=0.5, help="|Δ| counted as beyond (default: %(default)s nats)")
    p.add_argument(
        "--tolerance", type=float, default=0.1, help="mean |Δ| still numeric noise (default: %(default)s nats)"
    )
    p.add_argument("--is-cap", type=float, default=2.0, help="truncated importance weight cap (default: %(default)s)")
    p.add_argument("--worst", type=int, default=3, help="worst positions shown per trajectory (default: %(default)s)")
    p.add_argument("--out", type=Path, help="write the records with per-token recomputed logprobs here (JSONL)")
    p.add_argument("--json", type=Path, help="write the per-trajectory and overall numbers here (JSON)")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    try:
        return _verify(a)
    except VerifyError as e:
        print(f"strands-tito verify: {e}", file=sys.stderr)
        return 2


def _verify(a: argparse.Namespace) -> int:
    records = iter_records(a.file)
    first = next(records, None)  # a file that cannot be read fails before the model is loaded
    if first is None:
        raise VerifyError(f"{a.file}: no records")
    sequences_of(first, 0)
    recomputer = Recomputer(a.python, a.model, a.device, a.dtype)
    out = a.out.open("w") if a.out is not None else None
    progress = None if a.no_progress or not sys.stderr.isatty() else sys.stderr
    try:
        found = run(
            itertools.chain([first], records),
            recomputer,
            threshold=a.threshold,
            tolerance=a.tolerance,
            cap=a.is_cap,
            keep=a.worst,
            out=out,
            progress=progress,
        )
    finally:
        recomputer.close()
        if out is not None:
            out.close()
    overall = found.total.summary(a.threshold, a.tolerance)
    counts = ", ".join(f"{n} {v}" for v, n in found.verdicts.items() if n)
    print(
        f"overall: {overall['verdict'] or 'nothing compared'}  {found.trajectories} trajectories ({counts})  "
        f"tokens {overall['tokens']}  mean |Δ| {overall['mean_abs_diff']:.4f}  max |Δ| {overall['max_abs_diff']:.4f}  "
        f"beyond {a.threshold:g}: {overall['share_beyond_threshold']:.2%}  shifted-mask control "
        f"{overall['shifted_mean_abs_diff']}  (model on {recomputer.device}, {a.dtype})"
    )
    if a.json is not None:
        a.json.write_text(json.dumps({"overall": overall, "verdicts": found.verdicts, "trajectories": found.rows}))
    if not found.total.tokens:
        print("strands-tito verify: no recorded logprobs to compare", file=sys.stderr)
        return 1
    return 0 if found.verdicts["mismatch"] == found.verdicts["misaligned"] == 0 else 1
