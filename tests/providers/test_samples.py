"""Episodes of several samples: a rewritten history (real Strands conversation managers) and ``template`` reasoning
retention (the real Qwen3 and Qwen3.5 templates) start new samples, each exact, against the local engine over HTTP.

What every test checks: each sample equals what the engine received and produced, call by call; each request equals
the chat template's rendering of the messages Strands passed at that moment; and the generated tokens with loss mask
1, over all samples, are exactly the tokens the engine generated.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from strands import Agent, tool
from strands.agent.conversation_manager import (
    SummarizingConversationManager,
)
from strands.types.exceptions import EventLoopException
from transformers import PreTrainedTokenizerBase

from strands_tito import HistoryRewrittenError, SGLangModel
from strands_tito.providers.prompt import format_messages, format_tool_specs
from strands_tito.testing.engine import EngineRecord, LocalEngine, Reply, Script
from strands_tito.testing.family_tokenizers import family_tokenizer
from strands_tito.trajectory import Trajectory

from ..helpers.agents import (
    SYSTEM,
    assert_matches_engine,
    generate_records,
    make_model,
    sliding_window_agent,
    stepping_engine,
)


class Seen:
    """What Strands passed to the model at each call that was answered (copied then, before any later rewrite)."""

    def __init__(self, model: SGLangModel) -> None:
        self.calls: list[tuple[list[Any], list[Any] | None, str | None]] = []
        stream = model.stream

        async def recording(
            messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
        ) -> AsyncIterator[Any]:
            call = (copy.deepcopy(messages), copy.deepcopy(tool_specs), system_prompt)
            async for event in stream(messages, tool_specs, system_prompt, **kwargs):
                yield event
            self.calls.append(call)  # not reached when the call failed (a context overflow) before any request

        model.stream = recording  # type: ignore[method-assign]


def rendered(tokenizer: PreTrainedTokenizerBase, call: tuple[list[Any], list[Any] | None, str | None]) -> list[int]:
    """The chat template's own rendering of what Strands passed (the model's raw text kept, as the provider does)."""
    messages, tool_specs, system_prompt = call
    text = tokenizer.apply_chat_template(
        format_messages(messages, system_prompt),
        tools=format_tool_specs(tool_specs),
        add_generation_prompt=True,
        tokenize=False,
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def assert_exact_samples(samples: list[Trajectory], records: list[EngineRecord]) -> None:
    """Each sample is what the engine received and produced, its records taken in order; none is left over."""
    assert sum(len(s.turns) for s in samples) == len(records)
    position = 0
    for sample in samples:
        assert_matches_engine(sample, records[position : position + len(sample.turns)])
        position += len(sample.turns)
    generated = sum(len(r.output_ids or []) for r in records)
    assert sum(sum(s.loss_mask) for s in samples) == generated


async def test_sliding_window_starts_exact_samples(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = stepping_engine(start_engine, qwen3, 12)
    model = make_model(engine, qwen3)
    seen = Seen(model)
    agent = sliding_window_agent(model, engine)
    result = await agent.invoke_async("Do the task step by step.")
    assert str(result).strip() == "Done."

    records = generate_records(engine)
    samples = model.samples
    assert len(records) == 13 and len(samples) > 2  # every third call the window moved
    assert samples[-1] is model.trajectory
    assert_exact_samples(samples, records)
    assert [r.input_ids for r in records] == [rendered(qwen3, call) for call in seen.calls]


async def test_summarizing_starts_exact_samples(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    summary = Script(match="Please summarize this conversation.", turns=[Reply(text="Steps were taken.")], repeat=True)
    engine = stepping_engine(start_engine, qwen3, 14, summary)
    model = make_model(engine, qwen3, context_window_limit=560)
    seen = Seen(model)
    agent = Agent(
        model=model,
        tools=[engine.step_tool],  # type: ignore[attr-defined]
        system_prompt=SYSTEM,
        callback_handler=None,
        conversation_manager=SummarizingConversationManager(
            summary_ratio=0.6, preserve_recent_messages=2, summarization_system_prompt="Summarize."
        ),
        retry_strategy=None,
    )
    await agent.invoke_async("Do the task step by step.")

    records = generate_records(engine)
    summaries = [r for r in records if r.output_ids and qwen3.decode(r.output_ids).startswith("Steps were taken.")]
    samples = model.samples
    assert summaries and len(samples) == len(summaries) + 1  # the agent went on after each summary
    assert_exact_samples(samples, [r for r in records if r not in summaries])
    agent_calls = [c for c in seen.calls if c[2] == SYSTEM]
    assert [r.input_ids for r in records if r not in summaries] == [rendered(qwen3, c) for c in agent_calls]
    # The summaries are samples too (of the model's own state, outside the agent): after a reset every generated token
    # is in exactly one sample of the rollout history.
    model.reset()
    assert sum(sum(s.loss_mask) for s in model.rollout_history) == sum(len(r.output_ids or []) for r in records)


async def test_raise_policy_keeps_the_old_behaviour(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = stepping_engine(start_engine, qwen3, 12)
    model = make_model(engine, qwen3, on_rewrite="raise")
    agent = sliding_window_agent(model, engine, system_prompt=None)
    with pytest.raises(EventLoopException) as raised:  # Strands wraps what a model raises inside a tool loop
        await agent.invoke_async("Do the task step by step.")
    assert isinstance(raised.value.__cause__, HistoryRewrittenError)
    assert "on_rewrite='new_sample'" in str(raised.value.__cause__)
    assert len(model.samples) == 1
    with pytest.raises(ValueError, match="on_rewrite must be one of"):
        model.update_config(on_rewrite="drop")


# -- reasoning retention -----------------------------------------------------------------------------------------

FAMILIES = {
    # family: (tool parser, the reply's reasoning opener: Qwen3.5's generation prompt opens <think> itself)
    "qwen3": ("hermes", "<think>\n"),
    "qwen3.5": ("qwen_xml", ""),
}


def family_engine(start_engine: Any, name: str, split: list[int]) -> tuple[PreTrainedTokenizerBase, LocalEngine]:
    """The family's tokenizer and an engine with its four replies, ``split`` into the scripts of successive engine
    conversations (a new sample is a new conversation for the engine: its prompt extends no earlier one)."""
    tokenizer = family_tokenizer(name)
    opener = FAMILIES[name][1]
    call = (
        f"<tool_call>\n{json.dumps({'name': 'lookup', 'arguments': {'key': 'a'}})}\n</tool_call>"
        if name == "qwen3"
        else "<tool_call>\n<function=lookup>\n<parameter=key>\na\n</parameter>\n</function>\n</tool_call>"
    )
    replies = [
        f"{opener}I should look it up.\n</think>\n\n{call}",
        f"{opener}Found it.\n</think>\n\nIt is 1.",
        f"{opener}The user asks again.\n</think>\n\nStill 1.",
        f"{opener}A third question.\n</think>\n\nAlways 1.",
    ]
    stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    steps = [Reply(text=r + "<|im_end|>", eos=False) for r in replies]
    scripts = [Script(turns=steps[sum(split[:i]) : sum(split[: i + 1])]) for i in range(len(split))]
    return tokenizer, start_engine(*scripts, tokenizer=tokenizer, eos_token_ids=stops)


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"{key} = 1"


async def three_user_turns(model: SGLangModel) -> Seen:
    seen = Seen(model)
    agent = Agent(model=model, tools=[lookup], system_prompt=SYSTEM, callback_handler=None, retry_strategy=None)
    for question in ("What is a?", "Are you sure?", "And now?"):
        await agent.invoke_async(question)
    return seen


@pytest.mark.parametrize("name", list(FAMILIES))
async def test_template_retention_renders_each_user_turn(start_engine, name: str) -> None:  # type: ignore[no-untyped-def]
    tokenizer, engine = family_engine(start_engine, name, [2, 1, 1])
    model = make_model(engine, tokenizer, tool_parser=FAMILIES[name][0], reasoning_retention="template")
    seen = await three_user_turns(model)

    records = generate_records(engine)
    # A sample per user turn (the template drops the earlier reasoning); the tool loop stays in the first.
    assert [len(s.turns) for s in model.samples] == [2, 1, 1]
    assert_exact_samples(model.samples, records)
    assert [r.input_ids for r in records] == [rendered(tokenizer, call) for call in seen.calls]
    assert "I should look it up." not in tokenizer.decode(records[2].input_ids)


@pytest.mark.parametrize("name", list(FAMILIES))
async def test_keep_retention_keeps_one_sample(start_engine, name: str) -> None:  # type: ignore[no-untyped-def]
    tokenizer, engine = family_engine(start_engine, name, [4])
    model = make_model(engine, tokenizer, tool_parser=FAMILIES[name][0])
    seen = await three_user_turns(model)

    records = generate_records(engine)
    assert model.samples == [model.trajectory]
    assert_exact_samples(model.samples, records)
    # The earlier reasoning stays in the context, where the template would drop it.
    assert "I should look it up." in tokenizer.decode(records[2].input_ids)
    assert records[2].input_ids != rendered(tokenizer, seen.calls[2])


async def test_an_edited_earlier_message_starts_a_new_sample(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    # The model's last message is untouched: only the copy of what the sample holds shows the edit (as when a sliding
    # window truncates an old tool result in place).
    engine = start_engine(Script(turns=[Reply(text="one")]), Script(turns=[Reply(text="two")]))
    model = make_model(engine, qwen3)
    seen = Seen(model)
    agent = Agent(model=model, system_prompt=SYSTEM, callback_handler=None, retry_strategy=None)
    await agent.invoke_async("First")
    agent.messages[0]["content"][0]["text"] = "Edited"
    await agent.invoke_async("Second")

    records = generate_records(engine)
    assert [len(s.turns) for s in model.samples] == [1, 1]
    assert_exact_samples(model.samples, records)
    assert [r.input_ids for r in records] == [rendered(qwen3, call) for call in seen.calls]


async def test_capture_records_one_row_per_sample(start_engine, qwen3, memory) -> None:  # type: ignore[no-untyped-def]
    # Spans -> the collector's assembler -> records (the dicts JSONL and Parquet rows are written from): one per
    # sample, all of one episode, numbered in order, each equal to its sample; an episode reward (and an agent's
    # reward) reaches every sample.
    from strands_tito import capture
    from strands_tito.providers.slime import samples_for_agents

    from ..helpers.capture import assemble, assert_same, from_memory
    from ..helpers.slime import Sample

    engine = stepping_engine(start_engine, qwen3, 12)
    model = make_model(engine, qwen3)
    agent = sliding_window_agent(model, engine)
    await agent.invoke_async("Do the task step by step.")
    samples = model.samples
    assert len(samples) > 2
    # slime: one Sample per sample, sharing the rollout id (taken while the episode is open).
    base = Sample(index=4, group_index=1, prompt="Do the task step by step.")
    filled = samples_for_agents(base, samples)
    assert [f.metadata["sample_index"] for f in filled] == list(range(len(samples)))
    assert len({f.metadata["rollout_id"] for f in filled}) == 1 and filled[0].metadata["rollout_id"]
    assert [f.tokens for f in filled] == [s.token_ids for s in samples]
    capture.record_reward(1.0, agent=agent, episode=True)
    capture.record_reward(0.5, agent=agent)
    model.reset()  # the episode ends: every sample's end signal

    records = assemble(from_memory(memory), {s.trajectory_id for s in samples})
    rows = [records[s.trajectory_id].to_dict() for s in samples]
    assert [r["sample_index"] for r in rows] == list(range(len(samples)))
    assert len({r["episode_id"] for r in rows}) == 1 and rows[0]["episode_id"]
    assert all(r["complete"] and r["rewards"] == [1.0, 0.5] for r in rows)
    for sample in samples:
        assert_same(records[sample.trajectory_id].trajectory, sample)
