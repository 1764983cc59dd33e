"""``strands_sglang.client``: the client and its module constants, with strands-tito's values.

``NON_RETRYABLE_STATUS_CODES`` and ``CONTEXT_LENGTH_PATTERNS`` are what the client actually uses (the default
:class:`~strands_tito.providers.client.RetryPolicy`'s statuses, the context-length markers); change the policy with
``SGLangClient(url, retry=RetryPolicy(...))``, not by editing these.
"""

from strands_tito.providers.client import CONTEXT_LENGTH_MARKERS, DEFAULT_MAX_CONNECTIONS, RetryPolicy
from strands_tito.providers.sglang_client import SGLangClient

NON_RETRYABLE_STATUS_CODES = RetryPolicy().never_retry_statuses
CONTEXT_LENGTH_PATTERNS = CONTEXT_LENGTH_MARKERS

__all__ = [
    "CONTEXT_LENGTH_PATTERNS",
    "DEFAULT_MAX_CONNECTIONS",
    "NON_RETRYABLE_STATUS_CODES",
    "RetryPolicy",
    "SGLangClient",
]
