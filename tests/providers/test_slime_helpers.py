"""slime ``Sample`` s from captured trajectories: top-p replay that passes slime's own check, and one sample per agent.

slime itself (torch, Ray, Megatron) is not installable here; ``Sample`` is the examples' stand-in with slime's field
names (``slime/utils/types.py``), and :func:`slime_top_p_check` is slime's check transcribed from
``slime/ray/rollout.py`` (THUDM/slime PR #2167): with ``--rollout-top-p`` below 1 every sample must have both top-p
fields, ``response_length + 1`` offsets, and the last offset equal to the id count.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np
from strands import Agent, tool

from strands_tito.capture import recorder as capture
from strands_tito.providers.slime import fill_sample, samples_for_agents
from strands_tito.testing.engine import LocalEngine, Reply, Script, routed_experts_for
from strands_tito.trajectory import Trajectory

from ..helpers.agents import calculator, generate_records, hermes_call, make_agent, make_model
from ..helpers.slime import Sample


def slime_top_p_check(samples: list[Any]) -> None:
    """slime's assertion when ``args.rollout_top_p != 1.0`` (``slime/ray/rollout.py``, transcribed)."""
    for sample in samples:
        ids, offsets = sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets
        assert ids is not None and offsets is not None, "rollout_top_p != 1.0 requires rollout_top_p_token_ids"
        assert len(offsets) == sample.response_length + 1
        assert offsets[-1] == len(ids)


def decoded(meta: dict[str, Any], key: str) -> list[int]:
    values: list[int] = np.frombuffer(base64.b64decode(meta[key]), dtype="<i4").tolist()
    return values


async def test_top_p_replay_fills_what_slime_checks(start_engine: Callable[..., LocalEngine], qwen3: Any) -> None:
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="It is 2.")]),
        routed_experts=(3, 2, 8),
    )
    model = make_model(
        engine,
        qwen3,
        return_top_p=True,
        return_routed_experts=True,
        routed_experts_layout=(3, 2, 8),
        sampling_params={"max_new_tokens": 256, "top_p": 0.9},
    )
    await make_agent(model, [calculator]).invoke_async("What is 5-3?")
    trajectory: Trajectory = model.token_manager
    sample = fill_sample(Sample(prompt="What is 5-3?"), trajectory, qwen3)
    slime_top_p_check([sample])

    start = trajectory.initial_prompt_length
    assert sample.tokens == trajectory.token_ids and sample.response_length == len(trajectory) - start
    assert sample.loss_mask == trajectory.loss_mask[start:]
    assert sample.status == Sample.Status.COMPLETED
    # Each generated token's row is exactly the server's kept set; tool and template tokens get empty rows.
    served = iter(generate_records(engine))
    first = next(served).response["meta_info"]
    rows: list[list[int]] = []
    for meta in (first, next(served).response["meta_info"]):
        ids, offsets = decoded(meta, "top_p_token_ids"), decoded(meta, "top_p_token_offsets")
        rows.append([ids[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)])
    ids, offsets = sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets
    got = [ids[offsets[i] : offsets[i + 1]] for i in range(sample.response_length)]
    tool_tokens = trajectory.turns[1].prompt_length
    assert got[: len(rows[0])] == rows[0]
    assert got[len(rows[0]) : len(rows[0]) + tool_tokens] == [[]] * tool_tokens
    assert got[len(rows[0]) + tool_tokens :] == rows[1]
    # The routing slime replays: (len - 1, layers, top_k), what the engine routed.
    assert np.array_equal(sample.rollout_routed_experts, routed_experts_for(trajectory.token_ids, 0, 3, 2, 8))


async def test_one_sample_per_agent_sharing_the_rollout(
    start_engine: Callable[..., LocalEngine], qwen3: Any, memory: Any
) -> None:
    engine = start_engine(
        Script(
            match="You are the orchestrator.",
            turns=[Reply(text=hermes_call("ask_researcher", question="What is 6*7?")), Reply(text="It is 42.")],
        ),
        Script(match="You are the researcher.", turns=[Reply(text="6*7 = 42.")]),
    )
    researcher = Agent(
        model=make_model(engine, qwen3),
        name="researcher",
        system_prompt="You are the researcher.",
        callback_handler=None,
    )

    @tool
    async def ask_researcher(question: str) -> str:
        """Ask the researcher a question.

        Args:
            question: The question.
        """
        return str(await researcher.invoke_async(question))

    orchestrator = Agent(
        model=make_model(engine, qwen3),
        name="orchestrator",
        system_prompt="You are the orchestrator.",
        tools=[ask_researcher],
        callback_handler=None,
    )
    await orchestrator.invoke_async("What is 6*7? Ask the researcher.")
    trajectories = [capture.state_of(a).trajectory for a in (orchestrator, researcher)]  # type: ignore[union-attr]
    base = Sample(index=7, group_index=3, prompt="What is 6*7?")
    top, sub = samples_for_agents(base, trajectories)  # type: ignore[arg-type]

    for sample, trajectory in ((top, trajectories[0]), (sub, trajectories[1])):
        assert sample.tokens == trajectory.token_ids
        assert sample.loss_mask == trajectory.loss_mask[trajectory.initial_prompt_length :]
        assert (sample.index, sample.group_index, sample.prompt) == (7, 3, "What is 6*7?")
        assert sample.metadata["trajectory_id"] == trajectory.trajectory_id
    assert top.metadata["rollout_id"] == sub.metadata["rollout_id"] == top.metadata["episode_id"] is not None
    assert top.metadata["parent_trajectory_id"] is None
    assert sub.metadata["parent_trajectory_id"] == trajectories[0].trajectory_id
    assert (top.metadata["agent_name"], sub.metadata["agent_name"]) == ("orchestrator", "researcher")
    assert base.tokens == [] and base.metadata == {}  # the given sample is left as it was
