"""The one error root of strands-tito, and the backend-neutral errors of a generation request.

Every exception the project raises on purpose derives from :class:`StrandsTitoError`, so ``except
StrandsTitoError`` catches all of them (and nothing from Strands, httpx or Python itself). Most also keep the builtin
base they always had (``ValueError``, ``RuntimeError``, ``OSError``) so existing ``except`` clauses still match; the
loop-limit errors also derive from Strands' ``EventLoopException`` so the agent re-raises them as they are.

This module is on the bottom layer: it imports nothing of the project and no framework. Classes are defined where
they are raised (the module in brackets) and stay importable from there; the generation errors are defined here.

The hierarchy (``A = B`` is one class under two names: the ``SGLang*`` names are the documented names for SGLang
users and the names strands-sglang 0.6 had; both backends raise the same classes by design, so one ``except`` works
for SGLang and vLLM alike)::

    StrandsTitoError
    ├── GenerationError = SGLangClientError          a model call failed; nothing was recorded
    │   ├── ServerHTTPError = SGLangHTTPError           the server answered an error status (.status, .body)
    │   │   ├── ContextLengthError = SGLangContextLengthError   the prompt does not fit the context window
    │   │   ├── ThrottledError = SGLangThrottledError          429/503 through every retry
    │   │   └── VLLMEndpointError (vllm)               vLLM refuses or lacks the endpoint the config needs
    │   ├── ServerConnectionError = SGLangConnectionError   unreachable, or the connection broke mid-reply
    │   │   └── ServerUnreachableError                   no connection could be opened (the server is down)
    │   ├── ReplyDecodingError = SGLangDecodingError     200 with a body that is not the expected JSON
    │   ├── RequestCancelledError = SGLangCancelledError  the caller's cancel signal was set
    │   ├── TokenResponseError (generation)            the reply breaks the protocol
    │   │   ├── SGLangResponseError (sglang)
    │   │   │   └── SGLangInvalidSampleError (sglang), also InvalidSampleError
    │   │   ├── VLLMResponseError (vllm)
    │   │   │   └── VLLMInvalidSampleError (vllm), also InvalidSampleError
    │   │   └── InvalidSampleError (generation)         the server's sampling failed numerically (a NaN logprob)
    │   ├── TokenAbortedError (generation)             the server aborted the generation
    │   │   ├── SGLangAbortedError (sglang)
    │   │   └── VLLMAbortedError (vllm)
    │   ├── HistoryRewrittenError (episode)            the history was rewritten and on_rewrite is "raise"
    │   └── ImagesNotSupportedError (token_model)      images for a provider or model that cannot take them
    ├── MissingDependencyError, also ImportError     an optional extra is not installed (names the extra)
    ├── HTTPTransportError (connection_pool)         the lean HTTP/1.1 pool's own failures (mapped by the client)
    │   ├── HTTPTimeout
    │   └── HTTPConnectError
    ├── PromptError (prompt), also ValueError        the messages cannot be rendered to tokens
    ├── ToolParserDetectionError (tool_parsers.detect), also ValueError   no tool parser fits the tokenizer
    ├── RoutedExpertsLayoutError (moe_layout), also ValueError   routing asked for, its layout neither given nor found
    ├── UnknownToolParserError (tool_parsers), also KeyError and ValueError   no parser has that name
    ├── TemplateFetchError (testing.chat_templates), also RuntimeError   a chat template could not be fetched
    ├── SdistFetchError (testing.sdist), also RuntimeError      an sdist could not be fetched from PyPI
    ├── TrajectoryError (trajectory), also ValueError   a turn or record breaks the trajectory's invariants
    ├── ReplayDataError (replay), also ValueError   routing or top-p data missing a part or inconsistent with its turn
    ├── SpanSchemaError (spans), also ValueError     a span does not follow the span schema
    ├── ImageSchemaError (span_images), also ValueError
    ├── LineageSchemaError (span_lineage), also ValueError
    ├── OTLPDecodeError (otlp), also ValueError
    ├── CaptureConfigError (settings), also RuntimeError   a setting would lose token data, or cannot be read
    ├── RewardTargetError (capture), also ValueError   record_reward not told whose reward, and not one agent open
    ├── UpstreamChangedError (upstream), also RuntimeError   Strands, the OTel SDK or transformers moved a name we use
    ├── SpoolError (spool), also OSError
    ├── LoopLimitReachedError = ToolLimitReachedError (limiter), also strands' EventLoopException
    │   ├── MaxToolIterationsReachedError
    │   ├── MaxToolCallsReachedError
    │   └── MaxMessagesReachedError
    ├── ViewerError (viewer), also ValueError        a viewer command cannot read its input or start (one line)
    ├── VerifyError (verify)                         `strands-tito verify` cannot use its input, model or Python
    ├── BindError (collector.service), also OSError
    ├── StoreError (collector.store), also OSError   the store cannot be opened or written
    │   └── StoreInUse                                 another collector has the store open
    ├── PayloadTooLarge (collector.ingest), also ValueError
    ├── TooManyOpen (collector.ingest), also RuntimeError   a request would open trajectories past the cap (503)
    ├── ExporterConfigError (exporters.base), also RuntimeError
    └── AgentLightningError (exporters.agentlightning), also RuntimeError
        └── AgentLightningAuthError

The local engine (``strands_tito.testing.engine``, a test/dev server) keeps its own protocol errors; they never reach
a user of the providers.
"""

from __future__ import annotations

__all__ = [
    "ContextLengthError",
    "GenerationError",
    "MissingDependencyError",
    "ReplyDecodingError",
    "RequestCancelledError",
    "ServerConnectionError",
    "ServerHTTPError",
    "ServerUnreachableError",
    "StrandsTitoError",
    "ThrottledError",
]


class StrandsTitoError(Exception):
    """Root of every strands-tito error (see the module docs for the whole hierarchy)."""


class MissingDependencyError(StrandsTitoError, ImportError):
    """A feature needs a package of an optional extra that is not installed; the message names the extra, of the
    distribution that has it wherever the feature is installed (the collector's on a collector host)."""

    def __init__(self, feature: str, package: str, extra: str, distribution: str = "strands-tito") -> None:
        super().__init__(f"{feature} needs the {package} package: pip install '{distribution}[{extra}]'")
        self.extra = extra


class GenerationError(StrandsTitoError):
    """A model call failed: the server could not be reached or refused, or its reply cannot be used.

    ``SGLangClientError`` is this class's name for SGLang users (and strands-sglang 0.6's); vLLM raises it too.
    """


class ServerHTTPError(GenerationError):
    """The server answered with an error status.

    Constructed as strands-sglang 0.6's ``SGLangHTTPError(message, *, status, body)``.

    Attributes:
        status: HTTP status code.
        body: Response body as text.
    """

    def __init__(self, message: str, *, status: int, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ContextLengthError(ServerHTTPError):
    """The prompt (plus requested new tokens) does not fit the model's context window."""


class ThrottledError(ServerHTTPError):
    """The server is overloaded (429/503) and stayed so until the retries ran out."""


class ServerConnectionError(GenerationError):
    """The server could not be reached, or the connection broke before a full reply arrived."""


class ServerUnreachableError(ServerConnectionError):
    """No connection could be opened to the server (refused, no route), through the client's whole retry window."""


class ReplyDecodingError(GenerationError):
    """The server answered 200 with a body that is not valid JSON (or not the JSON shape expected)."""


class RequestCancelledError(GenerationError):
    """The caller's cancel signal was set while the request was in flight; the request was abandoned."""
