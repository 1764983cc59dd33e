"""Typed configuration: a key the provider's config ``TypedDict`` lacks warns, naming it and the valid keys."""

from __future__ import annotations

import warnings

import pytest
from transformers import PreTrainedTokenizerBase

from strands_tito import SGLangClient, SGLangModel, VLLMClient, VLLMModel
from strands_tito.providers.token_model import TokenModel


def build(kind: str, tokenizer: PreTrainedTokenizerBase, **config: object) -> TokenModel:
    if kind == "sglang":
        return SGLangModel(
            tokenizer=tokenizer, client=SGLangClient("http://127.0.0.1:9"), tool_parser="hermes", **config
        )
    return VLLMModel(tokenizer=tokenizer, client=VLLMClient("http://127.0.0.1:9"), tool_parser="hermes", **config)


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_a_typo_in_a_config_key_warns_at_construction(kind: str, qwen3: PreTrainedTokenizerBase) -> None:
    with pytest.warns(UserWarning, match=r"unknown \w+Config key\(s\) \['sampling_param'\]; valid keys are .*") as rec:
        model = build(kind, qwen3, sampling_param={"temperature": 0.0})
    assert "'sampling_params'" in str(rec[0].message)
    assert rec[0].filename == __file__  # points at the caller's line, not inside strands-tito
    assert model.get_config()["sampling_param"] == {"temperature": 0.0}  # kept, as Strands' providers do


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_a_typo_in_update_config_warns(kind: str, qwen3: PreTrainedTokenizerBase) -> None:
    model = build(kind, qwen3)
    with pytest.warns(UserWarning, match=r"\['enable_thinkin'\]"):
        model.update_config(enable_thinkin=False)


@pytest.mark.parametrize("kind", ["sglang", "vllm"])
def test_valid_config_keys_do_not_warn(kind: str, qwen3: PreTrainedTokenizerBase) -> None:
    extra = {"return_routed_experts": False} if kind == "sglang" else {"endpoint": "completions"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = build(
            kind,
            qwen3,
            model_id="m",
            sampling_params={"temperature": 0.0},
            return_logprob=True,
            enable_thinking=None,
            context_window_limit=4096,
            **extra,
        )
        model.update_config(**extra, context_window_limit=8192)
