"""strands-tito inspect: terminal and HTML views of JSONL and Parquet trajectory files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from strands_tito.assembly import TrajectoryRecord
from strands_tito.cli import main
from strands_tito.exporters import ParquetExporter

from .otlp_helpers import random_trajectory


def records() -> list[dict]:  # type: ignore[type-arg]
    rng = random.Random(3)
    first, second = random_trajectory(rng, turns=2), random_trajectory(rng, turns=1)
    first.trajectory_id, second.trajectory_id = "good", "bad"
    good = TrajectoryRecord("good", first, complete=True, model_id="m", rewards=[1.0])
    bad = TrajectoryRecord("bad", second, complete=False, reason="turn 1 is missing")
    return [good.to_dict(), bad.to_dict()]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_inspect_terminal_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    data = records()
    if kind == "jsonl":
        path = tmp_path / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    else:
        path = tmp_path / "parquet"
        exporter = ParquetExporter(path)
        exporter.write(data, exporter.next_position())
    out_html = tmp_path / "view.html"
    assert main(["inspect", str(path), "--tokenizer", "qwen3", "--html", str(out_html), "--no-color"]) == 0
    out = capsys.readouterr().out
    assert "trajectory good  complete  model=m  reward=1.0" in out
    assert "INCOMPLETE (turn 1 is missing)" in out
    assert "2 trajectories, 1 complete, 1 incomplete" in out
    first = data[0]
    turn = first["turns"][1]
    assert f"   1  {turn['prompt_length']:>7}  {turn['output_length']:>6}    stop" in out
    page = out_html.read_text()
    assert page.count("<section>") == 2 and "<script" not in page
    assert page.count("class='out'") == sum(1 for s in first["segments"] if s[0]) + sum(
        1 for s in data[1]["segments"] if s[0]
    )
