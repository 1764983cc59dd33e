"""One prompt encoder per tokenizer, chat template and thinking switch, shared by every model and thread.

Models built on one tokenizer share the encoder (its probes run once), and the encoded system prompt and tools of a
first prompt are reused by every agent that starts with them. What is shared must never mix: two models on one
tokenizer with different templates, thinking switches or tools each get exactly the tokens their own template renders,
also when many threads build models and encode first prompts at once.
"""

from __future__ import annotations

import asyncio
import copy
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strands import tool
from transformers import PreTrainedTokenizerBase

from strands_tito import SGLangModel
from strands_tito.providers.families import FAMILIES
from strands_tito.providers.prompt import PromptEncoder, format_tool_specs, shared_prompt_encoder
from strands_tito.testing.engine import LocalEngine, Reply
from strands_tito.testing.family_tokenizers import family_tokenizer

from ..helpers.agents import assert_matches_engine, calculator, decode, generate_records, make_agent
from ..helpers.agents import make_model as agent_model

#: A second template for the same tokenizer: Qwen3's, with a line of its own before every system message.
VARIANT_MARK = "variant-template-line"


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value of {key}"


def variant_template(template: str) -> str:
    return VARIANT_MARK + "\n" + template


def counting_renders(tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts ``apply_chat_template`` calls on this tokenizer (the encoder renders through it)."""
    count = [0]
    original = tokenizer.apply_chat_template

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "apply_chat_template", counted)
    return count


def whole_prompt_ids(
    tokenizer: PreTrainedTokenizerBase, template: str, system: str, user: str, tools: list[Any] | None
) -> list[int]:
    """The first prompt as the template renders it whole and the tokenizer encodes it whole."""
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": user}],
        tools=format_tool_specs([t.tool_spec for t in tools]) if tools else None,
        add_generation_prompt=True,
        tokenize=False,
        chat_template=template,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_models_on_one_tokenizer_share_the_encoder(
    qwen3: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokenizer = copy.deepcopy(qwen3)
    renders = counting_renders(tokenizer, monkeypatch)
    SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer)
    assert renders[0] > 0  # the first model's encoder ran its probes
    renders[0] = 0
    models = [SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer) for _ in range(20)]
    assert renders[0] == 0, "a model built on a tokenizer that already has an encoder rendered probes again"
    assert len({id(shared_prompt_encoder(tokenizer)) for _ in models}) == 1
    # Another thinking switch is another encoder (its probes run once too).
    SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer, enable_thinking=False)
    assert renders[0] > 0
    assert shared_prompt_encoder(tokenizer, enable_thinking=False) is not shared_prompt_encoder(tokenizer)


def test_threads_building_models_get_one_encoder(qwen3: PreTrainedTokenizerBase) -> None:
    tokenizer = copy.deepcopy(qwen3)
    found: list[PromptEncoder] = []
    barrier = threading.Barrier(8)

    def build() -> None:
        barrier.wait()
        found.append(shared_prompt_encoder(tokenizer))

    threads = [threading.Thread(target=build) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and all(e is found[0] for e in found)


async def test_two_templates_on_one_tokenizer_never_mix(
    qwen3: PreTrainedTokenizerBase, start_engine: Callable[..., LocalEngine]
) -> None:
    """A model keeps the template it was built with after the tokenizer's template changes; agents of both models
    run at once, each request exactly its own template's rendering."""
    tokenizer = copy.deepcopy(qwen3)
    original = tokenizer.chat_template
    engine = start_engine(default=Reply(text="Done."))
    first = agent_model(engine, tokenizer)
    tokenizer.chat_template = variant_template(original)
    second = agent_model(engine, tokenizer)
    thinking_off = agent_model(engine, tokenizer, enable_thinking=False)
    models = [first, second, thinking_off, agent_model(engine, tokenizer)]
    agents = [make_agent(m, [calculator], system_prompt="S") for m in models]
    for model in models:
        model.update_config(sampling_params={"max_new_tokens": 64})  # keeps the template the model was built with
    await asyncio.gather(*(agent.invoke_async("Add.") for agent in agents))
    by_prompt = {tuple(r.input_ids or []): r for r in generate_records(engine)}
    for model, template, thinking in (
        (first, original, {}),
        (second, variant_template(original), {}),
        (thinking_off, variant_template(original), {"enable_thinking": False}),
    ):
        trajectory = model.trajectory_of(agents[models.index(model)])
        first_turn = trajectory.turns[0]
        sent = trajectory.token_ids[: first_turn.output_start]
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": "S"}, {"role": "user", "content": "Add."}],
            tools=format_tool_specs([calculator.tool_spec]),
            add_generation_prompt=True,
            tokenize=False,
            chat_template=template,
            **thinking,
        )
        assert sent == list(tokenizer.encode(text, add_special_tokens=False)), decode(tokenizer, sent)
        assert tuple(sent) in by_prompt
        records = [r for r in generate_records(engine) if r.conversation == by_prompt[tuple(sent)].conversation]
        assert_matches_engine(trajectory, records)
    assert VARIANT_MARK not in decode(tokenizer, first.trajectory_of(agents[0]).token_ids)


async def test_agents_with_other_tools_or_system_prompts_never_mix(
    qwen3: PreTrainedTokenizerBase, start_engine: Callable[..., LocalEngine]
) -> None:
    """Agents on one tokenizer (their own models, all at once) with other tools or system prompts: each first
    prompt is exactly its own whole rendering, though the system-and-tools part is encoded once per pair."""
    tokenizer = copy.deepcopy(qwen3)
    template = tokenizer.chat_template
    engine = start_engine(default=Reply(text="Done."))
    cases = [("S1", [calculator]), ("S1", [lookup]), ("S2", [calculator]), ("S1", None), ("S1", [calculator, lookup])]
    cases = cases * 3
    models = [agent_model(engine, tokenizer) for _ in cases]
    agents = [make_agent(m, tools or [], system_prompt=s) for m, (s, tools) in zip(models, cases, strict=True)]
    await asyncio.gather(*(agent.invoke_async("Hello.") for agent in agents))
    for model, agent, (system, tools) in zip(models, agents, cases, strict=True):
        trajectory = model.trajectory_of(agent)
        assert trajectory.token_ids[: trajectory.turns[0].output_start] == whole_prompt_ids(
            tokenizer, template, system, "Hello.", tools
        )


def test_first_prompts_from_many_threads(qwen3: PreTrainedTokenizerBase) -> None:
    tokenizer = copy.deepcopy(qwen3)
    template = tokenizer.chat_template
    encoder = shared_prompt_encoder(tokenizer)
    systems = ["You are a helpful assistant.", "Rules:\n" + "be brief. " * 200, " leading space", "S"]
    toolsets: list[list[Any] | None] = [None, [calculator], [lookup], [lookup, calculator]]
    expected = {
        (s, i, u): whole_prompt_ids(tokenizer, template, s, u, toolsets[i])
        for s in systems
        for i in range(len(toolsets))
        for u in ("Hi.", "tito-probe-user and more")
    }
    failures: list[str] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            system, index, user = rng.choice(list(expected))
            tools = toolsets[index]
            specs = [t.tool_spec for t in tools] if tools else None
            ids = encoder.first_prompt([{"role": "user", "content": [{"text": user}]}], specs, system)
            if ids != expected[(system, index, user)]:
                failures.append(f"{system[:20]!r} tools {index} user {user!r}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_the_system_and_tools_are_encoded_once(qwen3: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch) -> None:
    encoder = PromptEncoder(copy.deepcopy(qwen3))
    system = "Rules:\n" + "always check each tool result. " * 300
    specs = [calculator.tool_spec]
    encoder.first_prompt([{"role": "user", "content": [{"text": "one"}]}], specs, system)
    encoded: list[int] = []
    original = encoder.encode

    def counted(text: str) -> list[int]:
        encoded.append(len(text))
        return original(text)

    monkeypatch.setattr(encoder, "encode", counted)
    ids = encoder.first_prompt([{"role": "user", "content": [{"text": "two"}]}], specs, system)
    assert ids == whole_prompt_ids(encoder.tokenizer, encoder.chat_template or "", system, "two", [calculator])
    assert sum(encoded) < 200, "the system prompt and tools were encoded again"


# Families on their real vocabularies and on stand-ins: a tokenizer that treats the start of a text apart (a
# normalizer adding a prefix space) must not be cut, and the cut must never change an id.
@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=5, deadline=None)
@given(
    system=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40),
    user=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20),
)
def test_cut_first_prompts_are_exact_in_every_family(family: str, system: str, user: str) -> None:
    tokenizer = family_tokenizer(family)
    encoder = shared_prompt_encoder(tokenizer)
    specs = [calculator.tool_spec]
    for text in (user, user + "!"):  # the second one with the pair already cut
        messages: Any = [{"role": "user", "content": [{"text": text}]}]
        ids = encoder.first_prompt(messages, specs, system)
        tools = format_tool_specs(specs)
        formatted = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        if not encoder.tools_in_template:
            return  # the tools go into the system text: covered by the families' own tests
        whole = encoder.render(formatted, tools=tools, add_generation_prompt=True)
        assert ids == list(tokenizer.encode(whole, add_special_tokens=False))
