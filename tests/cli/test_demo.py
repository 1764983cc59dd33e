"""The README's main job runs the whole path: engine, unchanged agent switched on by env vars, collector, JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strands_tito.testing.demo import main, run_demo
from strands_tito.testing.family_tokenizers import family_tokenizer


def test_main_job_writes_an_exact_trajectory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "equals what the engine received and produced" in out
    [record] = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert record["complete"] is True
    assert record["resource"]["service.name"] == "strands-tito-demo"
    assert sum(record["loss_mask"]) > 0 and len(record["turns"]) == 2


def test_example_agent_on_a_non_qwen_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`strands-tito demo --chat-template glm-4.6`: the unchanged example (STRANDS_TITO_FAMILY=glm-4.6) on GLM-4.6's
    reference template, stand-in tokenizer and parser, against the engine as
    `strands-tito engine --chat-template glm-4.6` serves; the written trajectory equals what the engine received and
    produced."""
    assert main(["--chat-template", "glm-4.6", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "equals what the engine received and produced" in out
    [record] = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert record["complete"] is True and len(record["turns"]) == 2
    tokenizer = family_tokenizer("glm-4.6")
    text = str(tokenizer.decode(record["token_ids"], skip_special_tokens=False))
    # GLM-4.6's own markup, as single special tokens; the call was parsed by the glm parser and the tool ran.
    assert text.startswith("[gMASK]<sop><|system|>")
    # The model's <|observation|> stop token is the tool message's role token: kept once, never doubled.
    assert record["token_ids"].count(tokenizer.convert_tokens_to_ids("<|observation|>")) == 1
    assert "<tool_response>42</tool_response>" in text.replace("\n", "")
    assert text.endswith("25 + 17 = 42.<|user|>")
