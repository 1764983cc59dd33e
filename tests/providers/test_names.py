"""One trajectory accessor taught (``model.trajectory``); the older names stay as supported aliases."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from strands_tito import SGLangClient, SGLangModel

README = Path(__file__).resolve().parents[2] / "README.md"


def test_token_manager_and_rollout_are_the_trajectory_without_warning(qwen3: PreTrainedTokenizerBase) -> None:
    model = SGLangModel(tokenizer=qwen3, client=SGLangClient("http://127.0.0.1:9"), tool_parser="hermes")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert model.token_manager is model.trajectory
        assert model.rollout is model.trajectory


def test_the_readme_teaches_model_trajectory() -> None:
    text = README.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))
    assert "model.trajectory" in code
    assert "model.token_manager" not in code and "model.rollout" not in code
