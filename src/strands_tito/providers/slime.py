"""Helpers for slime's custom rollout functions: cached clients and tokenizers built from slime's arguments, and
``Sample`` s filled from captured trajectories (one per agent of a multi-agent episode, one per sample of a rewritten
one).

slime's ``Sample`` (``slime/utils/types.py``) is filled by attribute, so any object with its fields works (slime's own,
or a stand-in without slime installed). The fields, as slime reads them: ``tokens`` (the whole sequence),
``response_length`` and ``loss_mask`` / ``rollout_log_probs`` over the response (everything after the first prompt),
``weight_versions`` (one per model call), ``status`` (from the last call's finish reason), ``rollout_routed_experts``
(``(len - 1, num_layers, top_k)``) and, for top-p replay (``--rollout-top-p`` below 1), ``rollout_top_p_token_ids`` /
``rollout_top_p_token_offsets`` over the response, which slime asserts are set with ``response_length + 1`` offsets
ending at the id count (``slime/ray/rollout.py``).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from strands_tito.capture.recorder import lineage_of_trajectory
from strands_tito.providers.sglang_client import SGLangClient
from strands_tito.replay import decode_routed_experts, top_p_rows
from strands_tito.trajectory import Trajectory, TrajectoryError

_STATUS = {"stop": "COMPLETED", "length": "TRUNCATED", "abort": "ABORTED"}


@functools.cache
def get_client(base_url: str, **kwargs: Any) -> SGLangClient:
    """One shared :class:`SGLangClient` per URL and settings (so rollouts share one connection pool)."""
    return SGLangClient(base_url, **kwargs)


def get_client_from_slime_args(args: Any, **kwargs: Any) -> SGLangClient:
    """The shared client for slime's SGLang router, with a pool sized like slime's own HTTP client.

    Reads ``sglang_router_ip``, ``sglang_router_port``, ``sglang_server_concurrency``, ``rollout_num_gpus`` and
    ``rollout_num_gpus_per_engine`` from slime's parsed arguments; ``kwargs`` go to :class:`SGLangClient`.
    """
    base_url = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
    engines = max(1, args.rollout_num_gpus // max(1, args.rollout_num_gpus_per_engine))
    kwargs.setdefault("max_connections", max(1, args.sglang_server_concurrency * engines))
    return get_client(base_url, **kwargs)


@functools.cache
def get_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """Load (once per process) the tokenizer at ``path``."""
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    return tokenizer


def fill_sample(
    sample: Any, trajectory: Trajectory, tokenizer: PreTrainedTokenizerBase | None = None, *, logprobs: bool = True
) -> Any:
    """Fill ``sample``'s token fields from ``trajectory`` (see the module docstring); returns ``sample``.

    Tokens between model calls (tool results, template glue) get loss mask 0, logprob 0.0 and an empty top-p row,
    as slime's ``append_response_tokens`` gives them. A trajectory recorded without logprobs (``return_logprob``
    off) raises :class:`~strands_tito.trajectory.TrajectoryError` rather than filling ``rollout_log_probs`` with
    made-up values; ``logprobs=False`` leaves ``rollout_log_probs`` None for it (slime then recomputes them).
    Routing is set when every turn has it with a known layout (``routed_experts_layout=``); the top-p fields when
    every turn recorded its sets (``return_top_p=True``). ``response`` is decoded when a ``tokenizer`` is given.
    """
    start = trajectory.initial_prompt_length
    sample.tokens = list(trajectory.token_ids)
    sample.response_length = len(trajectory) - start
    sample.loss_mask = trajectory.loss_mask[start:]
    if trajectory.logprobs is None and logprobs:
        raise TrajectoryError(
            f"trajectory {trajectory.trajectory_id} was recorded without logprobs (return_logprob off), so slime's "
            "rollout_log_probs cannot be filled; record with return_logprob=True, or pass logprobs=False"
        )
    sample.rollout_log_probs = (
        None
        if trajectory.logprobs is None
        else [
            0.0 if value is None and not masked else value
            for value, masked in zip(trajectory.logprobs[start:], sample.loss_mask, strict=True)
        ]
    )
    sample.weight_versions = [t.weight_version for t in trajectory.turns if t.weight_version is not None]
    if trajectory.turns:
        sample.status = getattr(type(sample).Status, _STATUS[trajectory.turns[-1].finish_reason])
    layouts = {t.routed_experts_layout for t in trajectory.turns}
    if (
        len(layouts) == 1
        and (layout := layouts.pop()) is not None
        and None not in {t.routed_experts for t in trajectory.turns}
    ):
        sample.rollout_routed_experts = decode_routed_experts(
            trajectory.routed_experts, seq_len=len(trajectory), num_layers=layout[0], top_k=layout[1]
        )
    rows = top_p_rows(trajectory.turns)
    if rows is not None:
        ids, offsets = rows
        sample.rollout_top_p_token_ids = ids[offsets[start] :]
        sample.rollout_top_p_token_offsets = [end - offsets[start] for end in offsets[start:]]
    if tokenizer is not None:
        sample.response = tokenizer.decode(sample.tokens[start:], skip_special_tokens=False)
    return sample


def samples_for_agents(
    sample: Any, trajectories: Sequence[Trajectory], tokenizer: PreTrainedTokenizerBase | None = None
) -> list[Any]:
    """One ``Sample`` per agent of a multi-agent episode (slime's sub-agent fan-out returns ``list[Sample]``), or
    per sample of an episode whose history was rewritten (``trajectories=model.samples``, see ``docs/samples.md``).

    Each is a copy of ``sample`` (same ``index``, ``group_index``, prompt, label) filled from one trajectory by
    :func:`fill_sample`; its ``metadata`` gains ``rollout_id`` (the sample's own, else the episode: shared by all),
    ``trajectory_id``, ``episode_id``, ``parent_trajectory_id``, ``agent_name`` and ``sample_index``. Call it before
    the trajectories end (their lineage is known while they are open).
    """
    samples = []
    for trajectory in trajectories:
        lineage = lineage_of_trajectory(trajectory.trajectory_id)
        filled = fill_sample(copy.deepcopy(sample), trajectory, tokenizer)
        metadata = dict(getattr(filled, "metadata", None) or {})
        metadata.setdefault("rollout_id", lineage.episode_id if lineage else None)
        metadata.update(
            trajectory_id=trajectory.trajectory_id,
            episode_id=lineage.episode_id if lineage else None,
            parent_trajectory_id=lineage.parent_trajectory_id if lineage else None,
            agent_name=lineage.agent_name if lineage else None,
            sample_index=lineage.sample_index if lineage else None,
        )
        filled.metadata = metadata
        samples.append(filled)
    return samples
