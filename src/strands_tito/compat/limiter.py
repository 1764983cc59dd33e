"""``strands_sglang.limiter``: the loop limiter and its errors."""

from strands_tito.providers.limiter import (
    LoopLimiter,
    LoopLimitReachedError,
    MaxMessagesReachedError,
    MaxToolCallsReachedError,
    MaxToolIterationsReachedError,
)

__all__ = [
    "LoopLimitReachedError",
    "LoopLimiter",
    "MaxMessagesReachedError",
    "MaxToolCallsReachedError",
    "MaxToolIterationsReachedError",
]
