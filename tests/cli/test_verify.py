"""``strands-tito verify``: a trainer's recomputation of every generated token's logprob against the recorded one.

Bad input fails in one line; the numbers are the mean/max over the compared tokens; and (marker ``vllm``) on real
records: SmolLM2-135M-Instruct served by real vLLM on CPU, captured by environment variables in a fresh agent process
through ``strands-tito collect``, agrees within noise, while the same records with the mask shifted by one position
are found misaligned.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strands_tito.html_view import TokenTexts, index_row, trajectory_payload
from strands_tito.verify import Comparison, ForwardPass, compare, importance_weights
from strands_tito.viewer import Decoder

from ..helpers.collector import CollectorProcess, read_records
from ..helpers.vllm_server import VLLM_REAL_MODEL_ENV, run_verify, serve_vllm, vllm_paths

RECORD = {"trajectory_id": "t", "token_ids": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [None, -1.0, -2.0]}


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A directory that looks like a model to the command (its config.json), enough to get past the argument checks."""
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    return directory


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing file", "no such file"),
        ("not json", "not JSON"),
        ("no loss mask", "not a trajectory record"),
        ("logprobs too short", "one per token"),
        ("no model", "not a Hugging Face model directory"),
        ("no torch", ""),
    ],
)
def test_bad_input_fails_in_one_line(tmp_path: Path, model_dir: Path, case: str, says: str) -> None:
    path, model, python = tmp_path / "in.jsonl", model_dir, sys.executable
    records: list[Any] = [RECORD]
    if case == "not json":
        path.write_text("{oops\n" + json.dumps(RECORD) + "\n")
    elif case == "no loss mask":
        records = [{"trajectory_id": "t", "token_ids": [1, 2]}]
    elif case == "logprobs too short":
        records = [{**RECORD, "logprobs": [None, -1.0]}]
    elif case == "no model":
        model = tmp_path / "nowhere"
    if case != "not json" and case != "missing file":
        jsonl(path, records)
    # The project's own Python has no torch (the recomputing Python is --python); with one, config.json is empty.
    done = run_verify(path, "--model", model, "--python", python)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("strands-tito verify: ") and says in line
    if case == "no torch":
        assert "torch" in line or "cannot load the model" in line


finite = st.floats(-30, 0, allow_nan=False)


@given(st.lists(st.tuples(finite, st.floats(-1, 1)), min_size=1, max_size=40))
def test_the_numbers_are_over_the_compared_tokens(pairs: list[tuple[float, float]]) -> None:
    recorded = [r for r, _ in pairs]
    positions = list(range(1, len(pairs) + 1))
    recomputed = {p: r + d for p, (r, d) in zip(positions, pairs, strict=True)}
    result, values = compare(ForwardPass([0] * (len(pairs) + 1), positions, recorded, 0), recomputed, 0.5, 3)
    diffs = [abs(v - r) for v, r in zip(values, recorded, strict=True)]
    assert result.tokens == len(pairs)
    assert math.isclose(result.mean_abs, sum(diffs) / len(diffs), abs_tol=1e-12)
    assert result.max_abs == max(diffs)
    assert result.beyond == sum(d > 0.5 for d in diffs)
    assert [w[0] for w in result.worst] == sorted(diffs, reverse=True)[:3]
    # The control pairs each recorded value with the next position's recomputed one.
    shifted = [abs(recomputed[p + 1] - r) for p, r in zip(positions, recorded, strict=True) if p + 1 in recomputed]
    assert result.shifted_tokens == len(shifted)
    for recorded_lp, value in zip(recorded, values, strict=True):
        ratio, truncated = importance_weights(recorded_lp, value, 2.0)
        assert math.isclose(ratio, math.exp(value - recorded_lp)) and truncated == min(ratio, 2.0)


def test_the_verdict_tells_noise_from_drift_from_misalignment() -> None:
    noise = Comparison(tokens=10, sum_abs=0.3, max_abs=0.1, shifted_tokens=9, shifted_sum_abs=20.0)
    drift = Comparison(tokens=10, sum_abs=5.0, max_abs=2.0, shifted_tokens=9, shifted_sum_abs=20.0)
    shifted = Comparison(tokens=10, sum_abs=20.0, max_abs=5.0, shifted_tokens=9, shifted_sum_abs=19.0)
    assert [c.verdict(0.1) for c in (noise, drift, shifted, Comparison())] == [
        "noise",
        "mismatch",
        "misaligned",
        None,
    ]


# -- real records of real vLLM (marker: vllm) ------------------------------------------------------------------------

QUESTIONS = ["What is the capital of France?", "Name a colour of the sky.", "What is two plus two?"]
AGENT = """
import asyncio, sys
from strands import Agent
from strands.agent.conversation_manager import NullConversationManager
from strands.types.exceptions import MaxTokensReachedException
from transformers import AutoTokenizer
from strands_tito import VLLMClient, VLLMModel

async def main() -> None:
    tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
    for question in sys.argv[3:]:
        model = VLLMModel(
            tokenizer=tokenizer, client=VLLMClient(sys.argv[2]),
            sampling_params={"temperature": 0.0, "max_tokens": 48},
        )
        agent = Agent(model=model, callback_handler=None, conversation_manager=NullConversationManager())
        for prompt in (question, "Say it again in other words."):
            try:
                await agent.invoke_async(prompt)
            except MaxTokensReachedException:  # recorded all the same
                pass
        model.reset()

asyncio.run(main())
"""


def shifted_by_one(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its loss mask and logprobs one position later: the off-by-one a trainer can make."""
    mask, logprobs = record["loss_mask"], record["logprobs"]
    return {**record, "loss_mask": [0, *mask[:-1]], "logprobs": [None, *logprobs[:-1]]}


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_verify_agrees_on_real_vllm_records_and_catches_a_shifted_mask(tmp_path: Path) -> None:
    python, model_dir = vllm_paths(VLLM_REAL_MODEL_ENV)
    args = ("--max-model-len", "2048", "--dtype", "bfloat16")
    collector = CollectorProcess(tmp_path / "store", tmp_path / "records.jsonl", "--idle-timeout", "60").start()
    try:
        with serve_vllm(python, model_dir, tmp_path / "server.log", *args) as url:
            env = {**os.environ, "STRANDS_TITO_CAPTURE": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
            agent = subprocess.run(
                [sys.executable, "-c", AGENT, model_dir, url, *QUESTIONS],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert agent.returncode == 0, agent.stderr[-3000:]
        records = read_records(tmp_path / "records.jsonl", len(QUESTIONS), timeout=60)
    finally:
        collector.stop()
    assert all(r["complete"] for r in records), [r["reason"] for r in records]
    turns = [t for r in records for t in r["turns"]]
    assert len(turns) == 2 * len(QUESTIONS)
    # vLLM reports no cached_tokens without --enable-prompt-tokens-details: unknown, not 0. The latency is measured.
    assert all(t["cached_tokens"] is None and t["latency_s"] > 0 for t in turns)

    out, report = tmp_path / "verified.jsonl", tmp_path / "verify.json"
    done = run_verify(
        tmp_path / "records.jsonl", "--model", model_dir, "--python", python, "--out", out, "--json", report
    )
    assert done.returncode == 0, done.stdout + done.stderr
    numbers = json.loads(report.read_text())
    overall = numbers["overall"]
    generated = sum(sum(r["loss_mask"]) for r in records)
    assert overall["tokens"] == generated and overall["verdict"] == "noise"
    # bf16 serving against a float32 forward: hundredths on average, far below the shifted-mask control.
    assert overall["mean_abs_diff"] < 0.1 and overall["shifted_mean_abs_diff"] > 5 * overall["mean_abs_diff"]
    assert [row["verdict"] for row in numbers["trajectories"]] == ["noise"] * len(records)
    assert "overall: noise" in done.stdout and "|Δ|" in done.stdout
    for record, verified in zip(records, map(json.loads, out.read_text().splitlines()), strict=True):
        assert verified["token_ids"] == record["token_ids"] and verified["verify"]["verdict"] == "noise"
        compared = [v is not None for v in verified["recomputed_logprobs"]]
        assert compared == [bool(m) for m in record["loss_mask"]]
        weights = [w for w in verified["importance_weights"] if w is not None]
        assert len(weights) == sum(compared) and all(0.5 < w < 2.0 for w in weights)
        assert all(t <= 2.0 for t in verified["truncated_importance_weights"] if t is not None)
        # The viewer: the verdict and mean |Δ| in the index, the recomputed logprobs beside the recorded ones.
        row = index_row(0, verified)
        assert (row["verify"], row["verify_diff"]) == ("noise", verified["verify"]["mean_abs_diff"])
        payload = trajectory_payload(verified, TokenTexts(Decoder()))
        assert [v is not None for v in payload["recomputed"]] == compared

    shifted = jsonl(tmp_path / "shifted.jsonl", [shifted_by_one(r) for r in records])
    done = run_verify(shifted, "--model", model_dir, "--python", python, "--json", report)
    assert done.returncode == 1, done.stdout + done.stderr
    numbers = json.loads(report.read_text())
    assert numbers["overall"]["verdict"] == "misaligned" and numbers["overall"]["mean_abs_diff"] > 0.2
    assert "overall: misaligned" in done.stdout
