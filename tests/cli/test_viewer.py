"""strands-tito inspect: terminal and HTML views of JSONL and Parquet trajectory files."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from strands_tito.assembly import TrajectoryRecord
from strands_tito.cli import main
from strands_tito.exporters import ParquetExporter

from ..helpers.otlp import random_trajectory


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
    # The page embeds the index and each trajectory (its browser behaviour: tests/cli/test_viewer_browser.py).
    page = out_html.read_text()
    assert "<script type='application/json' id='t1'>" in page and "src=" not in page and "http" not in page
    index = json.loads(page.split("<script type='application/json' id='index'>")[1].split("</script>")[0])
    assert [(row["id"], row["complete"], row["tokens"]) for row in index] == [
        ("good", True, len(first["token_ids"])),
        ("bad", False, len(data[1]["token_ids"])),
    ]


def test_the_terminal_view_escapes_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from strands_tito.testing.tokenizers import build_qwen3_tokenizer

    tokenizer = build_qwen3_tokenizer()
    hostile = "tool output \x1b[2J\x1b]0;pwned\x07 done"
    record = records()[0]
    ids = tokenizer.encode(hostile, add_special_tokens=False)
    prompt_length = record["segments"][0][1]  # the first prompt becomes the hostile text, repeated
    record["token_ids"][:prompt_length] = (ids * prompt_length)[:prompt_length]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert main(["inspect", str(path), "--tokenizer", "qwen3"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in out


def test_the_terminal_view_flags_a_diverged_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = records()[0]
    record["prefix_report"] = [{"index": 1, "shares_prefix": False, "expected_length": 40, "divergence": 37}]
    record["calls"] = [{}, {}]
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert main(["inspect", str(path)]) == 0
    assert "PREFIX DIVERGED (call 1 does not extend the previous call from position 37" in capsys.readouterr().out


def test_tokenizer_names_come_from_the_testing_package_through_entry_points(tmp_path: Path) -> None:
    from strands_tito.testing.tokenizers import load_tiny_tokenizer, tiny_tokenizer_path
    from strands_tito.viewer import load_tokenizer

    assert load_tokenizer("tiny") is load_tiny_tokenizer()
    assert load_tokenizer(str(tiny_tokenizer_path())).get_vocab() == load_tiny_tokenizer().get_vocab()
    with pytest.raises(ValueError, match=r"expected one of \['qwen3', 'tiny'\] or a local path"):
        load_tokenizer(str(tmp_path))  # an empty directory
