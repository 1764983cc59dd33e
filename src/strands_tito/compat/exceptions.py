"""``strands_sglang.exceptions``: the six client errors (strands-tito's own classes under their SGLang names)."""

from strands_tito.providers.sglang_client import (
    SGLangClientError,
    SGLangConnectionError,
    SGLangContextLengthError,
    SGLangDecodingError,
    SGLangHTTPError,
    SGLangThrottledError,
)

__all__ = [
    "SGLangClientError",
    "SGLangConnectionError",
    "SGLangContextLengthError",
    "SGLangDecodingError",
    "SGLangHTTPError",
    "SGLangThrottledError",
]
