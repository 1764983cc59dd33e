"""The real chat templates come from the llama-cpp-python sdist on PyPI and are cached."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from strands_tito.testing.chat_templates import TemplateFetchError, real_templates_dir

FAMILY_TEMPLATES = [
    "Qwen-Qwen3-0.6B",
    "Qwen-QwQ-32B",
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen3-Coder",
    "Qwen3.5-4B",
    "GLM-4.6",
    "GLM-4.7-Flash",
    "Kimi-K2-Instruct",
    "Kimi-K2-Thinking",
    "moonshotai-Kimi-K2",
    "deepseek-ai-DeepSeek-V3.1",
    "openai-gpt-oss-120b",
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.3-70B-Instruct",
    "MiniMax-M2",
]


@pytest.mark.parametrize("name", FAMILY_TEMPLATES)
def test_every_family_template_is_there(real_template: Callable[[str], str], name: str) -> None:
    text = real_template(name)
    assert "{%" in text and "messages" in text


def test_the_cache_is_reused_and_unknown_names_are_listed(real_template: Callable[[str], str]) -> None:
    first = real_templates_dir()
    assert real_templates_dir() == first
    with pytest.raises(TemplateFetchError, match=r"Qwen-Qwen3-0\.6B"):
        real_template("no-such-model")
