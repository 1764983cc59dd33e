"""The README's main job runs the whole path: engine, unchanged agent switched on by env vars, collector, JSONL."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from strands_tito.testing.demo import main, run_demo
from strands_tito.testing.family_tokenizers import family_tokenizer


def test_main_job_writes_an_exact_trajectory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path) == 0
    out = capsys.readouterr().out
    assert "equals what the engine received and produced" in out
    output = tmp_path / "trajectories.jsonl"
    assert "the collector wrote a complete trajectory of " in out and f" tokens to {output}," in out
    [record] = [json.loads(line) for line in output.read_text().splitlines()]
    assert record["complete"] is True
    assert record["resource"]["service.name"] == "strands-tito-demo"
    assert sum(record["loss_mask"]) > 0 and len(record["turns"]) == 2
    # The variables that switched capture on, as a shell line: the collector's endpoint is the one that got the spans.
    shown = out[out.index("capture is switched on by these environment variables") :].splitlines()[1:3]
    variables = dict(word.split("=", 1) for line in shown for word in line.split() if "=" in word)
    assert variables["STRANDS_TITO_CAPTURE"] == "1" and variables["OTEL_SERVICE_NAME"] == "strands-tito-demo"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", variables["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert f"collector {variables['OTEL_EXPORTER_OTLP_ENDPOINT']}" in out
    assert shown[1].endswith("python -m strands_tito.testing.demo_agent") and "SGLANG_URL=http://" in shown[1]

    # A rerun appends to the same file and says so, naming what it added.
    assert run_demo(tmp_path) == 0
    again = capsys.readouterr().out
    lines = output.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == record
    assert "wrote a complete trajectory" not in again
    tokens = len(json.loads(lines[1])["token_ids"])
    assert (
        f"the collector appended a complete trajectory of {tokens} tokens to {output} (line 2 of 2: earlier runs' "
        "lines are kept), which equals what the engine received and produced"
    ) in again


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
