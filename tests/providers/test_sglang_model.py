"""What only `SGLangModel` does, end to end against the local engine over HTTP on 127.0.0.1 with real Strands agents:
input logprobs and prefix-cache reuse, routed-expert slices and layouts, slime's top-p sets, first-prompt logprobs.
What both providers share runs once per backend in ``test_token_model.py``.

The central assertion everywhere: the trajectory equals, token for token, what the engine received and produced.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

from strands_tito import SGLangResponseError
from strands_tito.replay import top_p_rows
from strands_tito.testing.engine import Reply, Script, routed_experts_for

from ..helpers.agents import assert_matches_engine, calculator, generate_records, hermes_call, make_agent, make_model
from ..helpers.moe import moe_model_dir


async def test_input_logprobs_start_one_token_before_each_new_prompt(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    """``logprob_start_len`` one before the new prompt keeps the prefix cache usable and gives every new prompt token
    the server's input logprob; the first prompt asks for none. (What both providers share: test_token_model.py.)"""
    engine = start_engine(
        Script(
            turns=[
                Reply(text=hermes_call("calculator", expression="25 * 17")),
                Reply(text=hermes_call("calculator", expression="425 + 1")),
                Reply(text="The answer is 426."),
            ]
        )
    )
    model = make_model(engine, qwen3)
    await make_agent(model, [calculator]).invoke_async("What is 25 * 17 + 1?")
    records = generate_records(engine)
    trajectory = model.trajectory
    assert_matches_engine(trajectory, records)
    assert [r.request["logprob_start_len"] for r in records] == [
        -1,
        *(t.prompt_start - 1 for t in trajectory.turns[1:]),
    ]
    assert all(r.cached_tokens and r.cached_tokens > 0 for r in records[1:])
    assert all(lp is None for lp in trajectory.logprobs[: trajectory.initial_prompt_length])
    for turn in trajectory.turns[1:]:
        assert all(lp is not None for lp in trajectory.logprobs[turn.prompt_start : turn.output_start])


async def test_routed_experts_are_asked_from_one_before_each_new_prompt(start_engine, qwen3, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SGLang returns routing from ``routed_experts_start_len``; each turn asks from its first unrecorded position, so
    the slices stitch into the whole sequence's routing (checked for both providers in test_token_model.py)."""
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]),
        routed_experts=(3, 2, 8),
        model_path=str(moe_model_dir(tmp_path / "moe", (3, 2, 8))),
    )
    model = make_model(engine, qwen3, return_routed_experts=True)
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.trajectory
    requests = [r.request for r in generate_records(engine)]
    assert [q["routed_experts_start_len"] for q in requests] == [0, trajectory.turns[1].prompt_start - 1]
    routing = trajectory.decode_routed_experts(num_layers=3, top_k=2)
    assert np.array_equal(routing, routed_experts_for(trajectory.token_ids, 0, 3, 2, 8))


async def test_top_p_sets_are_kept_per_token(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    """``return_top_p`` asks for slime's top-p sets; each turn keeps exactly the server's, prompt rows empty."""
    engine = start_engine(Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]))
    model = make_model(engine, qwen3, return_top_p=True, sampling_params={"max_new_tokens": 256, "top_p": 0.9})
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.token_manager
    requests = [r.request for r in generate_records(engine)]
    assert all(q["sampling_params"]["custom_params"] == {"return_top_p_token_ids": True} for q in requests)
    for turn, record in zip(trajectory.turns, generate_records(engine), strict=True):
        meta = record.response["meta_info"]
        ids = np.frombuffer(base64.b64decode(meta["top_p_token_ids"]), dtype="<i4").tolist()
        offsets = np.frombuffer(base64.b64decode(meta["top_p_token_offsets"]), dtype="<i4").tolist()
        assert (list(turn.top_p_token_ids or ()), list(turn.top_p_offsets or ())) == (ids, offsets)
    rows = top_p_rows(trajectory.turns)
    assert rows is not None
    ids, offsets = rows
    assert len(offsets) == len(trajectory) + 1 and offsets[-1] == len(ids)
    for position, masked in enumerate(trajectory.loss_mask):
        kept = ids[offsets[position] : offsets[position + 1]]
        # Generated tokens: the sampled token heads its kept set; prompt and tool tokens: an empty row.
        assert (kept[:1] == [trajectory.token_ids[position]]) if masked else kept == []


async def test_top_p_asked_for_but_not_served_is_a_clear_error(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="2")]))
    model = make_model(engine, qwen3, return_top_p=True)
    real_generate = model.client.generate

    async def without_top_p(*args, **kwargs):  # type: ignore[no-untyped-def]
        reply = await real_generate(*args, **kwargs)
        del reply["meta_info"]["top_p_token_ids"]
        return reply

    model.client.generate = without_top_p  # type: ignore[method-assign]
    with pytest.raises(SGLangResponseError, match="top-p token sets were requested"):
        await make_agent(model).invoke_async("hi")
    assert len(model.token_manager) == 0


async def test_routed_experts_with_a_layout_give_a_compact_npy(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(
        Script(turns=[Reply(text=hermes_call("calculator", expression="5 - 3")), Reply(text="2")]),
        routed_experts=(3, 2, 300),
    )
    model = make_model(engine, qwen3, return_routed_experts=True, routed_experts_layout=(3, 2, 300))
    await make_agent(model, [calculator]).invoke_async("5-3?")
    trajectory = model.token_manager
    assert {t.routed_experts_layout for t in trajectory.turns} == {(3, 2, 300)}
    routes = np.load(io.BytesIO(base64.b64decode(trajectory.to_dict()["routed_experts"])), allow_pickle=False)
    assert routes.dtype == np.uint16  # 300 experts do not fit uint8
    assert np.array_equal(routes, routed_experts_for(trajectory.token_ids, 0, 3, 2, 300))


async def test_first_prompt_logprobs_are_recorded_when_asked(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="Hello!")]), Script(turns=[Reply(text="Hello!")]))
    default = make_model(engine, qwen3)
    await make_agent(default).invoke_async("Hi")
    asked = make_model(engine, qwen3, first_prompt_logprobs=True)
    await make_agent(asked).invoke_async("Hi")
    off, on = generate_records(engine)
    # Off (the default) the first request asks for none, which keeps the shared prefix cacheable ...
    assert off.request["logprob_start_len"] == -1
    assert set(default.trajectory.logprobs[: default.trajectory.initial_prompt_length]) == {None}
    # ... on, it asks from position 0 as strands-sglang 0.6 does, and records what the server answered.
    assert on.request["logprob_start_len"] == 0
    prompt = asked.trajectory.initial_prompt_length
    served = [entry[0] for entry in on.response["meta_info"]["input_token_logprobs"]]
    assert len(served) == prompt and served[0] is None and None not in served[1:]
    assert asked.trajectory.logprobs[:prompt] == served
    assert_matches_engine(asked.trajectory, [on])


# -- the routed-experts layout, found without the user or refused at construction --------------------------------------


def test_the_layout_is_read_from_the_tokenizers_model_folder(start_engine, qwen3, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``AutoTokenizer.from_pretrained(folder)`` of the served checkpoint: its config.json gives the layout, with no
    request to the server (its model path says nothing)."""
    from transformers import AutoTokenizer

    folder = moe_model_dir(tmp_path / "Qwen3-MoE", (5, 3, 300), tokenizer=qwen3)
    engine = start_engine(model_path="unknown/elsewhere")
    model = make_model(engine, AutoTokenizer.from_pretrained(str(folder)), return_routed_experts=True)
    assert model.config["routed_experts_layout"] == (5, 3, 300)
    assert not any(r.path.endswith("model_info") for r in engine.records)


def test_the_layout_is_read_from_the_servers_model_path(start_engine, qwen3, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A tokenizer built elsewhere; the server reports the folder it serves (a real SGLang started with
    ``--model-path /models/...`` does), and its config.json gives the layout; a layout given wins."""
    engine = start_engine(model_path=str(moe_model_dir(tmp_path / "served", (4, 2, 16))))
    assert make_model(engine, qwen3, return_routed_experts=True).config["routed_experts_layout"] == (4, 2, 16)
    given = make_model(engine, qwen3, return_routed_experts=True, routed_experts_layout=(3, 2, 8))
    assert given.config["routed_experts_layout"] == (3, 2, 8)


def test_without_a_layout_the_model_refuses_at_construction(start_engine, qwen3, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Nowhere to read it (a Hub id not in the cache, a dense model's config, no server): one line saying what to
    pass, before any rollout; routing off needs nothing."""
    from strands_tito.providers.sglang import RoutedExpertsLayoutError, SGLangModel

    engine = start_engine(model_path="org/not-cached-anywhere")
    with pytest.raises(RoutedExpertsLayoutError) as refused:
        make_model(engine, qwen3, return_routed_experts=True)
    message = str(refused.value)
    assert "\n" not in message and "'org/not-cached-anywhere'" in message
    assert "pass routed_experts_layout=(num_hidden_layers, num_experts_per_tok, num_experts)" in message
    dense = tmp_path / "dense"
    dense.mkdir()
    (dense / "config.json").write_text('{"num_hidden_layers": 28, "model_type": "qwen3"}')
    engine = start_engine(model_path=str(dense))
    with pytest.raises(RoutedExpertsLayoutError, match="not an MoE config"):
        make_model(engine, qwen3, return_routed_experts=True)
    with pytest.raises(RoutedExpertsLayoutError, match="did not answer"):
        SGLangModel(tokenizer=qwen3, base_url="http://127.0.0.1:9", return_routed_experts=True)
    model = make_model(engine, qwen3)  # routing off: nothing to find
    with pytest.raises(RoutedExpertsLayoutError):
        model.update_config(return_routed_experts=True)
    assert not model.config.get("return_routed_experts") and "routed_experts_layout" not in model.config
