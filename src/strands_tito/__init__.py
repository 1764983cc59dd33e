"""strands-tito: token-in/token-out Strands model providers that record training-ready trajectories.

The pipeline, bottom layer first (each layer imports only the ones above it in this list; a test enforces it):

- ``trajectory`` (the one :class:`Trajectory` type), ``spans`` / ``span_images`` (the span schema and codec),
  ``records`` (the exported record's fields), ``assembly`` (spans -> trajectories, shared by every path), ``errors``;
- ``capture/``: token data on Strands' spans, switched on by environment variables, delivered without loss;
- ``providers/``: ``SGLangModel``, ``VLLMModel`` and what they share (client, prompt encoder, tool parsers, limiter);
- ``compat/``: strands-sglang 0.6's module paths (``strands_tito.client``, ``.tool_parsers.base`` ...) and its
  parser base class, the one place for strands-sglang compatibility;
- ``collector/`` (``strands-tito collect``) and ``exporters/`` (JSONL, Parquet, Agent Lightning): below the agent
  side, they load no Strands, transformers or providers, and install without them (the ``strands-tito-collector``
  distribution, with the bottom layer as ``strands-tito-core``: ``docs/collector.md``);
- ``viewer`` (``strands-tito inspect``);
- ``testing/``: the test harness, imported by no module above (the local engine, offline vocabularies, real chat
  templates, ``strands-tito demo``).

The names below are loaded on first use (PEP 562), so ``import strands_tito.collector`` or ``strands_tito.exporters``
(which sit below the agent side) does not pull in Strands, transformers or the providers, while
``from strands_tito import SGLangModel`` works as always.
"""

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from strands_tito.compat import install_module_paths

# strands_tito is shared by four distributions (core, exporters, collector, this agent side); only this one ships
# this file. Installed from wheels they share one folder; installed editable (a checkout: core/, exporters/,
# collector/, src/), each folder joins this package from the path. Without this distribution, strands_tito is a plain
# namespace package and the collector runs the same.
__path__ = pkgutil.extend_path(__path__, __name__)

# Only now (strands_tito.upstream needs strands_tito.errors, which the core distribution ships), and before any module
# of the package imports transformers: its "PyTorch was not found" notice reads like a broken install, and
# strands-tito needs no PyTorch (strands_tito.upstream.transformers_lib).
from strands_tito.upstream.transformers_lib import hide_torch_notice

hide_torch_notice()

if TYPE_CHECKING:
    from strands_tito.capture.recorder import RewardTargetError, record_reward
    from strands_tito.errors import (
        ContextLengthError,
        GenerationError,
        ReplyDecodingError,
        RequestCancelledError,
        ServerConnectionError,
        ServerHTTPError,
        ServerUnreachableError,
        StrandsTitoError,
        ThrottledError,
    )
    from strands_tito.providers.client import RetryPolicy, TokenClient
    from strands_tito.providers.limiter import (
        LoopLimiter,
        LoopLimitReachedError,
        MaxMessagesReachedError,
        MaxToolCallsReachedError,
        MaxToolIterationsReachedError,
        ToolLimiter,
        ToolLimitReachedError,
    )
    from strands_tito.providers.prompt import PromptEncoder, PromptError
    from strands_tito.providers.sglang import (
        HistoryRewrittenError,
        ImagesNotSupportedError,
        RoutedExpertsLayoutError,
        SGLangAbortedError,
        SGLangConfig,
        SGLangInvalidSampleError,
        SGLangModel,
        SGLangResponseError,
    )
    from strands_tito.providers.sglang_client import (
        SGLangCancelledError,
        SGLangClient,
        SGLangClientError,
        SGLangConnectionError,
        SGLangContextLengthError,
        SGLangDecodingError,
        SGLangHTTPError,
        SGLangThrottledError,
    )
    from strands_tito.providers.slime import (
        fill_sample,
        get_client,
        get_client_from_slime_args,
        get_tokenizer,
        samples_for_agents,
    )
    from strands_tito.providers.tool_parsers import (
        HermesToolParser,
        QwenXMLToolParser,
        ToolCall,
        ToolParser,
        get_tool_parser,
    )
    from strands_tito.providers.vllm import (
        VLLMAbortedError,
        VLLMConfig,
        VLLMInvalidSampleError,
        VLLMModel,
        VLLMResponseError,
    )
    from strands_tito.providers.vllm_client import VLLMClient, VLLMEndpointError
    from strands_tito.replay import decode_routed_experts
    from strands_tito.trajectory import Rollout, Segment, Trajectory, TrajectoryError, Turn

#: Public name -> the submodule that defines it.
_EXPORTS: dict[str, str] = {
    "record_reward": "capture.recorder",
    "RewardTargetError": "capture.recorder",
    "RetryPolicy": "providers.client",
    "SGLangCancelledError": "providers.sglang_client",
    "SGLangClient": "providers.sglang_client",
    "SGLangClientError": "providers.sglang_client",
    "SGLangConnectionError": "providers.sglang_client",
    "SGLangContextLengthError": "providers.sglang_client",
    "SGLangDecodingError": "providers.sglang_client",
    "SGLangHTTPError": "providers.sglang_client",
    "SGLangThrottledError": "providers.sglang_client",
    "TokenClient": "providers.client",
    "ContextLengthError": "errors",
    "GenerationError": "errors",
    "ReplyDecodingError": "errors",
    "RequestCancelledError": "errors",
    "ServerConnectionError": "errors",
    "ServerHTTPError": "errors",
    "ServerUnreachableError": "errors",
    "StrandsTitoError": "errors",
    "ThrottledError": "errors",
    "LoopLimitReachedError": "providers.limiter",
    "LoopLimiter": "providers.limiter",
    "MaxMessagesReachedError": "providers.limiter",
    "MaxToolCallsReachedError": "providers.limiter",
    "MaxToolIterationsReachedError": "providers.limiter",
    "ToolLimitReachedError": "providers.limiter",
    "ToolLimiter": "providers.limiter",
    "PromptEncoder": "providers.prompt",
    "PromptError": "providers.prompt",
    "HistoryRewrittenError": "providers.sglang",
    "ImagesNotSupportedError": "providers.sglang",
    "RoutedExpertsLayoutError": "providers.sglang",
    "SGLangAbortedError": "providers.sglang",
    "SGLangConfig": "providers.sglang",
    "SGLangModel": "providers.sglang",
    "SGLangResponseError": "providers.sglang",
    "SGLangInvalidSampleError": "providers.sglang",
    "get_client": "providers.slime",
    "get_client_from_slime_args": "providers.slime",
    "get_tokenizer": "providers.slime",
    "fill_sample": "providers.slime",
    "samples_for_agents": "providers.slime",
    "HermesToolParser": "providers.tool_parsers",
    "QwenXMLToolParser": "providers.tool_parsers",
    "ToolCall": "providers.tool_parsers",
    "ToolParser": "providers.tool_parsers",
    "get_tool_parser": "providers.tool_parsers",
    "Rollout": "trajectory",
    "Segment": "trajectory",
    "Trajectory": "trajectory",
    "TrajectoryError": "trajectory",
    "Turn": "trajectory",
    "decode_routed_experts": "replay",
    "VLLMAbortedError": "providers.vllm",
    "VLLMClient": "providers.vllm_client",
    "VLLMConfig": "providers.vllm",
    "VLLMEndpointError": "providers.vllm_client",
    "VLLMModel": "providers.vllm",
    "VLLMResponseError": "providers.vllm",
    "VLLMInvalidSampleError": "providers.vllm",
}


# strands-sglang 0.6's module paths (strands_tito.client, .exceptions, .tool_parsers.base, ...), served from compat/.
install_module_paths()


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
    "RetryPolicy",
    "RewardTargetError",
    "Rollout",
    "RoutedExpertsLayoutError",
    "SGLangAbortedError",
    "SGLangCancelledError",
    "SGLangClient",
    "SGLangClientError",
    "SGLangConfig",
    "SGLangConnectionError",
    "SGLangContextLengthError",
    "SGLangDecodingError",
    "SGLangHTTPError",
    "SGLangInvalidSampleError",
    "SGLangModel",
    "SGLangResponseError",
    "SGLangThrottledError",
    "Segment",
    "ServerConnectionError",
    "ServerHTTPError",
    "ServerUnreachableError",
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
    "VLLMInvalidSampleError",
    "VLLMModel",
    "VLLMResponseError",
    "decode_routed_experts",
    "fill_sample",
    "get_client",
    "get_client_from_slime_args",
    "get_tokenizer",
    "get_tool_parser",
    "record_reward",
    "samples_for_agents",
]
