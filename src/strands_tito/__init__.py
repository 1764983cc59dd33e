"""strands-tito: token-in/token-out Strands model providers that record training-ready trajectories."""

import pkgutil

# The collector and exporters live in the repository's collector/ and exporters/ folders; in a source checkout
# they join this package from there (a wheel simply contains them).
__path__ = pkgutil.extend_path(__path__, __name__)

from .capture import record_reward
from .client import (
    SGLangCancelledError,
    SGLangClient,
    SGLangClientError,
    SGLangConnectionError,
    SGLangContextLengthError,
    SGLangDecodingError,
    SGLangHTTPError,
    SGLangThrottledError,
)
from .limiter import (
    LoopLimiter,
    LoopLimitReachedError,
    MaxMessagesReachedError,
    MaxToolCallsReachedError,
    MaxToolIterationsReachedError,
    ToolLimiter,
    ToolLimitReachedError,
)
from .prompt import PromptEncoder, PromptError
from .sglang import (
    HistoryRewrittenError,
    ImagesNotSupportedError,
    SGLangAbortedError,
    SGLangConfig,
    SGLangModel,
    SGLangResponseError,
)
from .slime import get_client, get_client_from_slime_args, get_tokenizer
from .tool_parsers import HermesToolParser, QwenXMLToolParser, ToolCall, ToolParser, get_tool_parser
from .trajectory import Rollout, Segment, Trajectory, TrajectoryError, Turn, decode_routed_experts
from .vllm import VLLMAbortedError, VLLMClient, VLLMConfig, VLLMEndpointError, VLLMModel, VLLMResponseError

__all__ = [
    "HermesToolParser",
    "HistoryRewrittenError",
    "ImagesNotSupportedError",
    "LoopLimitReachedError",
    "LoopLimiter",
    "MaxMessagesReachedError",
    "MaxToolCallsReachedError",
    "MaxToolIterationsReachedError",
    "PromptEncoder",
    "PromptError",
    "QwenXMLToolParser",
    "Rollout",
    "SGLangAbortedError",
    "SGLangCancelledError",
    "SGLangClient",
    "SGLangClientError",
    "SGLangConfig",
    "SGLangConnectionError",
    "SGLangContextLengthError",
    "SGLangDecodingError",
    "SGLangHTTPError",
    "SGLangModel",
    "SGLangResponseError",
    "SGLangThrottledError",
    "Segment",
    "ToolCall",
    "ToolLimitReachedError",
    "ToolLimiter",
    "ToolParser",
    "Trajectory",
    "TrajectoryError",
    "Turn",
    "VLLMAbortedError",
    "VLLMClient",
    "VLLMConfig",
    "VLLMEndpointError",
    "VLLMModel",
    "VLLMResponseError",
    "decode_routed_experts",
    "get_client",
    "get_client_from_slime_args",
    "get_tokenizer",
    "get_tool_parser",
    "record_reward",
]
