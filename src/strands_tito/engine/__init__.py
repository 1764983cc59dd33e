"""A protocol-faithful local SGLang engine that replays scripted replies (for tests; no GPU needed).

Typical use::

    from strands_tito.engine import Fault, LocalEngine, Reply, Script
    from strands_tito.tokenizers import load_tokenizer

    with LocalEngine(load_tokenizer("qwen3"), scripts=[Script([Fault.http(503), Reply(text="Hi!")])]) as engine:
        ...  # talk to engine.base_url + "/generate", then inspect engine.records

or from a shell: ``python -m strands_tito.engine --port 0 --script script.json``.
"""

from .protocol import routed_experts_for, token_logprob
from .script import DEFAULT_REPLY, Fault, Reply, Script, ScriptFile, Step
from .server import EngineRecord, LocalEngine

__all__ = [
    "DEFAULT_REPLY",
    "EngineRecord",
    "Fault",
    "LocalEngine",
    "Reply",
    "Script",
    "ScriptFile",
    "Step",
    "routed_experts_for",
    "token_logprob",
]
