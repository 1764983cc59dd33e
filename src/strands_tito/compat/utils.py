"""``strands_sglang.utils``: the cached factories (:mod:`strands_tito.providers.slime`)."""

from strands_tito.providers.slime import get_client, get_client_from_slime_args, get_tokenizer

__all__ = ["get_client", "get_client_from_slime_args", "get_tokenizer"]
