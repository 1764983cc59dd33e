"""The README's main job runs the whole path: engine, unchanged agent switched on by env vars, collector, JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strands_tito.demo import run_demo


def test_main_job_writes_an_exact_trajectory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "equals what the engine received and produced" in out
    [record] = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert record["complete"] is True
    assert record["resource"]["service.name"] == "strands-tito-demo"
    assert sum(record["loss_mask"]) > 0 and len(record["turns"]) == 2
