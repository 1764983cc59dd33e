"""Minimal stand-ins for slime's `GenerateState` and `Sample`, used only when slime is not installed."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from strands_tito.testing.tokenizers import load_tokenizer


class GenerateState:
    """slime's per-process rollout state; only the tokenizer is used here."""

    def __init__(self, args: Any) -> None:
        self.tokenizer = load_tokenizer(args.hf_checkpoint)


@dataclass
class Sample:
    """The fields of slime's `Sample` that a custom generate function fills."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"

    group_index: int | None = None
    index: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_routed_experts: Any = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    status: "Sample.Status" = Status.PENDING
    tool_iters: int = 0
    tool_calls: int = 0
