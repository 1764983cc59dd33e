"""strands-sglang 0.6.2's own examples run unchanged on strands-tito against the local engine.

The examples come from the strands-sglang 0.6.2 sdist on PyPI (downloaded once with pip and cached under
:func:`strands_tito.testing.tokenizers.default_cache_root`; nothing of it is committed). Each is copied to a temporary
folder with one change, the import module ``strands_sglang`` -> ``strands_tito``, and run as ``__main__``.

What is substituted, and how (the examples' code is not touched):

* the server: the examples read ``SGLANG_BASE_URL``; it points at a local engine on 127.0.0.1;
* the tokenizer: the examples load ``AutoTokenizer.from_pretrained(<model path>)``, with the model path taken from
  the server's ``/model_info`` (``math_agent.py``, ``structured_output.py``) or from ``SGLANG_MODEL_ID``
  (``retokenization_drift/main.py``). The engine reports, and ``SGLANG_MODEL_ID`` names, a local folder holding the
  offline Qwen3 tokenizer (``build_qwen3_tokenizer().save_pretrained(...)``), so ``from_pretrained`` reads that
  folder instead of the hub. A real SGLang server started with a local ``--model-path`` reports the same;
* the model's answers: the engine replays scripted replies, token for token.

To check the trajectory, the test watches which ``SGLangModel`` objects the example creates (a recording subclass
put in place of ``strands_tito.SGLangModel`` for the run) and compares each one's ``model.rollout`` with what the
engine received and produced.
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest

import strands_tito
from strands_tito.testing.engine import LocalEngine, Reply, Script
from strands_tito.testing.sdist import SdistFetchError, cached_sdist_folder
from strands_tito.testing.tokenizers import default_cache_root

from ..helpers.agents import IM_END, assert_matches_engine, generate_records, hermes_call

PEER = "strands-sglang"
PEER_VERSION = "0.6.2"

#: The examples of the sdist: each runnable one, or why it is not run here.
EXAMPLES: dict[str, str | None] = {
    "math_agent.py": None,
    "structured_output.py": None,
    "retokenization_drift/main.py": None,
    "vlm_agent/vlm_agent.py": "needs image files the sdist does not ship and a multimodal model (images come later)",
}


# -- the peer's examples, from its sdist on PyPI ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def peer_examples() -> Path:
    """The sdist's ``examples/`` folder as shipped (cached; downloaded on first use)."""
    target = default_cache_root() / f"{PEER}-{PEER_VERSION}-examples"
    try:
        return cached_sdist_folder(f"{PEER}=={PEER_VERSION}", "examples", target)
    except SdistFetchError as e:
        pytest.fail(str(e))


def test_the_sdist_holds_the_examples_we_run(peer_examples: Path) -> None:
    shipped = sorted(str(p.relative_to(peer_examples)) for p in peer_examples.rglob("*.py"))
    assert shipped == sorted(EXAMPLES)


class Run:
    """One example run: its printed output and the models it created."""

    def __init__(self, out: str, models: list[Any]) -> None:
        self.out = out
        self.models = models

    def printed(self, label: str) -> str:
        found = re.findall(rf"^\s*{re.escape(label)}:? (.*)$", self.out, flags=re.MULTILINE)
        assert found, f"the example printed no {label!r}:\n{self.out}"
        return str(found[-1])


@pytest.fixture
def run_example(
    peer_examples: Path,
    tokenizer_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    """Run one of the peer's examples, import module rewritten, against ``engine``."""

    def run(name: str, engine: LocalEngine) -> Run:
        folder = tmp_path / "examples"
        shutil.copytree(peer_examples, folder)
        for path in folder.rglob("*.py"):
            original = path.read_text()
            path.write_text(re.sub(r"\bstrands_sglang\b", "strands_tito", original))
        script = folder / name
        lines = zip((peer_examples / name).read_text().splitlines(), script.read_text().splitlines(), strict=True)
        changed = [(a, b) for a, b in lines if a != b]
        assert changed and all(b == a.replace("strands_sglang", "strands_tito") for a, b in changed)

        models: list[Any] = []

        class RecordingSGLangModel(strands_tito.SGLangModel):
            def __init__(self, **kwargs: Any) -> None:
                super().__init__(**kwargs)
                models.append(self)

        monkeypatch.setattr(strands_tito, "SGLangModel", RecordingSGLangModel)
        monkeypatch.setenv("SGLANG_BASE_URL", engine.base_url)
        monkeypatch.setenv("SGLANG_MODEL_ID", str(tokenizer_dir))
        monkeypatch.chdir(script.parent)
        capsys.readouterr()
        runpy.run_path(str(script), run_name="__main__")
        return Run(capsys.readouterr().out, models)

    return run


@pytest.mark.parametrize("name", [n for n, why in EXAMPLES.items() if why is not None])
def test_examples_not_run_here(name: str) -> None:
    pytest.skip(f"{name}: {EXAMPLES[name]}")


def test_math_agent(start_engine, tokenizer_dir, run_example) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(
            turns=[
                Reply(text=hermes_call("calculator", expression="(1-2)*50")),
                Reply(text="Pairing the terms gives 50 pairs of -1, so the sum is $\\boxed{-50}$."),
            ]
        ),
        model_path=str(tokenizer_dir),
    )
    run = run_example("math_agent.py", engine)

    assert len(run.models) == 1
    model = run.models[0]
    records = generate_records(engine)
    assert len(records) == 2
    assert_matches_engine(model.rollout, records)
    assert model.rollout_history == []  # the example resets before its episode, when nothing is recorded yet
    rollout = model.rollout
    assert int(run.printed("Total tokens")) == len(rollout.token_ids)
    assert run.printed("Response tokens") == f"{sum(rollout.loss_mask)} (loss_mask=True)"
    assert run.printed("Segments").startswith(f"{len(rollout.segment_info)} ")
    assert run.printed("Segment 0") == f"Prompt ({rollout.initial_prompt_length} tokens)"
    assert "-50" in run.out  # the real calculator tool ran: its result is in the printed messages
    assert '"text": "-50"' in run.out


def test_structured_output(start_engine, tokenizer_dir, run_example) -> None:  # type: ignore[no-untyped-def]
    review = {"score": 3, "correctness": True, "issues": ["exponential time"], "suggestion": "Memoize it."}
    verdict = {"is_correct": True, "expected_answer": "55", "explanation": "10 * 11 / 2 = 55"}
    engine = start_engine(
        Script(turns=[Reply(text=json.dumps(review))]),
        Script(turns=[Reply(text=json.dumps(verdict))]),
        model_path=str(tokenizer_dir),
    )
    run = run_example("structured_output.py", engine)

    assert len(run.models) == 1
    model = run.models[0]
    records = generate_records(engine)
    assert len(records) == 2
    assert all("json_schema" in (r.request or {}).get("sampling_params", {}) for r in records)
    printed = re.findall(r"^Structured output: (\{.*?^\})", run.out, flags=re.MULTILINE | re.DOTALL)
    assert [json.loads(p) for p in printed] == [review, verdict]
    # Structured output is not part of any trajectory.
    assert len(model.rollout) == 0 and model.rollout_history == []
    assert run.printed("Rollout length").startswith("0 ")


def test_retokenization_drift(start_engine, qwen3, tokenizer_dir, run_example) -> None:  # type: ignore[no-untyped-def]
    # The final answer holds ')"' + '}}\n' (ids 9940, 11248), which re-encode differently: the example must find
    # drift exactly there, in the tokens the model produced.
    answer = [*qwen3.encode("The profit after tax is (", add_special_tokens=False), 9940, 11248, IM_END]
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="2.5 * (450 - 120)")), Reply(ids=answer)]),
        model_path=str(tokenizer_dir),
    )
    run = run_example("retokenization_drift/main.py", engine)

    assert len(run.models) == 1
    model = run.models[0]
    records = generate_records(engine)
    assert len(records) == 2
    assert_matches_engine(model.rollout, records)
    tokens = model.rollout.token_ids
    assert tokens[-len(answer) :] == answer
    drift = re.search(r">>> DRIFT at index (\d+)/(\d+) <<<", run.out)
    assert drift is not None and int(drift.group(2)) == len(tokens)
    assert len(tokens) - len(answer) <= int(drift.group(1)) < len(tokens)
    assert run.printed("Tokens") == f"{len(tokens)}, Outputs: {sum(model.rollout.loss_mask)}"
    assert "825" in qwen3.decode(records[1].input_ids)  # the real calculator tool ran and the model saw its result
