"""strands-tito inspect: terminal and HTML views of JSONL and Parquet trajectory files."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest

from strands_tito.assembly import TrajectoryRecord
from strands_tito.cli import main
from strands_tito.exporters import ParquetExporter
from strands_tito.html_view import RunIndex
from strands_tito.viewer import ViewerError

from ..helpers.commands import assert_one_line, strands_tito
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
    # Writing the page is quiet: one line, not the whole text view.
    assert capsys.readouterr().out == f"wrote {out_html}: 2 trajectories, 1 complete, 1 incomplete\n"
    assert main(["inspect", str(path), "--tokenizer", "qwen3", "--no-color"]) == 0
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
    with pytest.raises(ViewerError, match=r"holds no tokenizer .* one of qwen3, tiny or a local tokenizer directory"):
        load_tokenizer(str(tmp_path))  # an empty directory


# Every viewer command fails in one line that says what to do, never a traceback (run as users run it).


def _jsonl(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("command", ["inspect", "view"])
def test_a_missing_file_is_one_line(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.jsonl"
    done = strands_tito(command, str(missing), *(["--port", "0"] if command == "view" else []))
    assert_one_line(done, 2, f"strands-tito {command}: no such file or directory: {missing}", "--jsonl", "--parquet")


@pytest.mark.parametrize("command", ["inspect", "view"])
@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "line 2 is not JSON"),
        ("[1, 2]", "line 2 is not a trajectory record: a JSON list, not an object"),
        (
            '{"trajectory_id": "x", "token_ids": [1, 2], "loss_mask": [0]}',
            "line 2 is not a trajectory record: loss_mask is not a list of 2 entries",
        ),
        (
            '{"token_ids": [1], "loss_mask": [1], "logprobs": []}',
            "line 2 is not a trajectory record: logprobs is neither null nor a list of 1 entries",
        ),
    ],
)
def test_a_malformed_record_is_one_line_naming_the_line(command: str, line: str, says: str, tmp_path: Path) -> None:
    path = _jsonl(tmp_path, json.dumps(records()[0]), line)
    done = strands_tito(command, str(path), *(["--port", "0"] if command == "view" else []))
    assert_one_line(done, 2, f"strands-tito {command}: {path} {says}", "or remove that line")


def test_a_page_without_the_compared_run_is_one_line(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, json.dumps(records()[0]))
    done = strands_tito("inspect", str(path), "--compare", str(tmp_path / "other.jsonl"), "--html", str(tmp_path / "v"))
    assert_one_line(done, 2, f"no such file or directory: {tmp_path / 'other.jsonl'}")
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("command", ["inspect", "view"])
def test_a_hub_tokenizer_id_offline_is_one_line_with_the_fix(command: str, tmp_path: Path) -> None:
    path = _jsonl(tmp_path, json.dumps(records()[0]))
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty cache, no network
    extra = ["--port", "0"] if command == "view" else []
    done = strands_tito(command, str(path), "--tokenizer", "Qwen/Qwen3-0.6B", *extra, env=offline)
    assert_one_line(
        done,
        2,
        "cannot load tokenizer 'Qwen/Qwen3-0.6B'",
        "never downloads",
        "hf download Qwen/Qwen3-0.6B",
        "qwen3, tiny",
    )


def test_a_busy_port_is_one_line_with_the_fix(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, json.dumps(records()[0]))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = strands_tito("view", str(path), "--port", str(port))
    assert_one_line(done, 2, f"strands-tito view: cannot listen on 127.0.0.1:{port}", "--port 0 picks a free one")


def test_an_unwritable_page_is_one_line(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, json.dumps(records()[0]))
    done = strands_tito("inspect", str(path), "--html", str(tmp_path / "no" / "such" / "dir" / "v.html"))
    assert_one_line(done, 2, "strands-tito inspect: cannot write", "give --html a writable path")


def test_not_parquet_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "part-00000000.parquet").write_text("not parquet")
    done = strands_tito("inspect", str(folder))
    assert_one_line(done, 2, f"strands-tito inspect: {folder}", "is not a Parquet file or directory of parts")


# The served index takes in what reaches the files while `view` runs.


def test_the_served_index_reads_jsonl_lines_as_they_are_completed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = records()
    path = _jsonl(tmp_path, json.dumps(first))
    index = RunIndex([path])
    assert [row["id"] for row in index.rows] == ["good"]
    line = json.dumps(second) + "\n"
    with path.open("a") as handle:
        handle.write(line[:100])  # a line still being written is not read
        handle.flush()
        index.refresh()
        assert len(index.rows) == 1
        handle.write(line[100:] + "{broken\n")
    index.refresh()
    assert [(row["n"], row["id"]) for row in index.rows] == [(0, "good"), (1, "bad")]
    assert index.record(1)["token_ids"] == second["token_ids"]
    assert f"skipped: {path} line 3 is not JSON" in capsys.readouterr().err  # the page keeps serving the rest


def test_the_served_index_reads_new_parquet_parts_and_numbers_two_runs(tmp_path: Path) -> None:
    first, second = records()
    folder = tmp_path / "parquet"
    exporter = ParquetExporter(folder)
    exporter.write([first], exporter.next_position())
    other = _jsonl(tmp_path, json.dumps(second))
    index = RunIndex([folder, other])
    assert [(row["n"], row["run"], row["id"]) for row in index.rows] == [(0, 0, "good"), (1, 1, "bad")]
    exporter.write([second], exporter.next_position())
    index.refresh()
    assert [(row["n"], row["run"], row["id"]) for row in index.rows] == [(0, 0, "good"), (1, 1, "bad"), (2, 0, "bad")]
    assert index.record(2)["token_ids"] == second["token_ids"]
    assert index.record(1)["token_ids"] == second["token_ids"]
