"""``strands_sglang.sglang``: the model provider."""

from strands_tito.providers.sglang import SGLangConfig, SGLangModel

__all__ = ["SGLangConfig", "SGLangModel"]
