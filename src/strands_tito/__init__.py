"""strands-tito: token-in/token-out Strands model providers that record training-ready trajectories.

The names below are loaded on first use (PEP 562), so ``import strands_tito.collector`` or ``strands_tito.exporters``
(which sit below the agent side) does not pull in Strands, transformers or the providers, while
``from strands_tito import SGLangModel`` works as always.
"""

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

# The collector and exporters live in the repository's collector/ and exporters/ folders; in a source checkout
# they join this package from there (a wheel simply contains them).
__path__ = pkgutil.extend_path(__path__, __name__)

if TYPE_CHECKING:
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
        TokenClient,
    )
    from .errors import (
        ContextLengthError,
        GenerationError,
        ReplyDecodingError,
        RequestCancelledError,
        ServerConnectionError,
        ServerHTTPError,
        StrandsTitoError,
        ThrottledError,
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

#: Public name -> the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "record_reward": "capture",
    "SGLangCancelledError": "client",
    "SGLangClient": "client",
    "SGLangClientError": "client",
    "SGLangConnectionError": "client",
    "SGLangContextLengthError": "client",
    "SGLangDecodingError": "client",
    "SGLangHTTPError": "client",
    "SGLangThrottledError": "client",
    "TokenClient": "client",
    "ContextLengthError": "errors",
    "GenerationError": "errors",
    "ReplyDecodingError": "errors",
    "RequestCancelledError": "errors",
    "ServerConnectionError": "errors",
    "ServerHTTPError": "errors",
    "StrandsTitoError": "errors",
    "ThrottledError": "errors",
    "LoopLimitReachedError": "limiter",
    "LoopLimiter": "limiter",
    "MaxMessagesReachedError": "limiter",
    "MaxToolCallsReachedError": "limiter",
    "MaxToolIterationsReachedError": "limiter",
    "ToolLimitReachedError": "limiter",
    "ToolLimiter": "limiter",
    "PromptEncoder": "prompt",
    "PromptError": "prompt",
    "HistoryRewrittenError": "sglang",
    "ImagesNotSupportedError": "sglang",
    "SGLangAbortedError": "sglang",
    "SGLangConfig": "sglang",
    "SGLangModel": "sglang",
    "SGLangResponseError": "sglang",
    "get_client": "slime",
    "get_client_from_slime_args": "slime",
    "get_tokenizer": "slime",
    "HermesToolParser": "tool_parsers",
    "QwenXMLToolParser": "tool_parsers",
    "ToolCall": "tool_parsers",
    "ToolParser": "tool_parsers",
    "get_tool_parser": "tool_parsers",
    "Rollout": "trajectory",
    "Segment": "trajectory",
    "Trajectory": "trajectory",
    "TrajectoryError": "trajectory",
    "Turn": "trajectory",
    "decode_routed_experts": "trajectory",
    "VLLMAbortedError": "vllm",
    "VLLMClient": "vllm",
    "VLLMConfig": "vllm",
    "VLLMEndpointError": "vllm",
    "VLLMModel": "vllm",
    "VLLMResponseError": "vllm",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ContextLengthError",
    "GenerationError",
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
    "ReplyDecodingError",
    "RequestCancelledError",
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
    "ServerConnectionError",
    "ServerHTTPError",
    "StrandsTitoError",
    "ThrottledError",
    "TokenClient",
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
