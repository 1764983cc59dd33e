"""The local test/dev engine: a scripted stand-in for an SGLang (or vLLM) server -- not a production server.

It runs no model and needs no GPU: every reply comes from a script (:class:`Script` of :class:`Reply` and
:class:`Fault` steps), so tests, the demo and the benchmarks can drive the providers over real HTTP, inject the faults
a deployment produces and compare exactly which tokens went in and came out (:class:`EngineRecord`). No provider,
capture, collector or exporter module imports it (only the demo and the command line do).

Typical use::

    from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script
    from strands_tito.testing.tokenizers import load_tokenizer

    with LocalEngine(load_tokenizer("qwen3"), scripts=[Script([Fault.http(503), Reply(text="Hi!")])]) as engine:
        ...  # talk to engine.base_url + "/generate", then inspect engine.records

or from a shell: ``strands-tito engine --port 0 --tokenizer tiny --script script.json``.

Modules, for a newcomer (endpoints depend on the core; the server wires endpoints to the core; nothing imports back):

* :mod:`~strands_tito.testing.engine.server` -- :class:`LocalEngine`: socket, thread, routing table; builds one core;
* :mod:`~strands_tito.testing.engine.core` -- :class:`EngineCore`: settings and shared state behind a public API
  (records, conversations, requests in flight, pause/abort, the request lifecycle ``schedule``);
* endpoints: :mod:`~strands_tito.testing.engine.sglang_api` (``/generate``), :mod:`~strands_tito.testing.engine.admin`
  (health, info, cache, abort, pause), :mod:`~strands_tito.testing.engine.openai_chat` (``/v1/chat/completions``, with
  its parsing in :mod:`~strands_tito.testing.engine.openai_parsing`), :mod:`~strands_tito.testing.engine.vllm_api`
  (vLLM's token-id endpoints);
* building blocks: :mod:`~strands_tito.testing.engine.protocol` (SGLang's validation, messages, synthetic logprobs),
  :mod:`~strands_tito.testing.engine.outputs` (stops, text, ``/generate`` bodies),
  :mod:`~strands_tito.testing.engine.conversations` (prefix matching, scripts, prefix cache),
  :mod:`~strands_tito.testing.engine.script` (scripts and faults), :mod:`~strands_tito.testing.engine.records`
  (records, SSE and broken-body helpers), :mod:`~strands_tito.testing.engine.images`; the HTTP/1.1 server with its
  fault injection is :mod:`strands_tito.testing.http_server`;
* :mod:`~strands_tito.testing.engine.cli` -- ``strands-tito engine`` / ``python -m strands_tito.testing.engine``.

It mirrors SGLang 0.5.23's ``/generate`` (request validation and the three 400 body shapes, ``meta_info``,
finish reasons, ``logprob_start_len``, prefix-cache ``cached_tokens``, routed experts, SSE) and the info/health/cache
endpoints.  It also serves an OpenAI-compatible ``/v1/chat/completions`` that renders messages with the tokenizer's
chat template and returns token ids in vLLM's or SGLang's field names (``LocalEngine(openai_flavor=...)``; see
:mod:`strands_tito.testing.engine.openai_chat`).  Deliberate differences from a real server:

* batch requests (``input_ids`` as a list of lists, ``text`` lists, per-item lists, ``n > 1``) get 400
  ``"batch not supported by strands-tito engine"``; ``input_embeds`` and multimodal data are rejected the same way;
* grammars (``json_schema``, ``regex``, ...), penalties, ``min_new_tokens``, LoRA, hidden states and ``stop_regex``
  are validated where SGLang validates them but otherwise ignored -- the script decides the tokens;
* FastAPI-level type checks are strict (``"5"`` for an int is rejected; pydantic would coerce it) and the error
  text is pydantic-like rather than byte-identical;
* a scripted reply that ends without a stop token reports ``{"type": "length", "length": max_new_tokens}``;
* HTTP faults (503, 429, ...) and aborts with a status are plain HTTP errors even when ``stream`` is true;
* in streaming mode every output token is its own cumulative chunk, and a slow reply waits before the first one;
* the routed-expert ids and logprobs are synthetic (see :func:`routed_experts_for`, :func:`token_logprob`);
* ``/abort_request`` ends a pending slow reply with the running-request abort body; ``/pause_generation`` holds new
  requests until ``/continue_generation`` (mode ``abort`` also aborts pending ones).
"""

from strands_tito.testing.engine.core import EngineCore, Speculative
from strands_tito.testing.engine.protocol import routed_experts_for, token_logprob
from strands_tito.testing.engine.records import EngineRecord
from strands_tito.testing.engine.script import DEFAULT_REPLY, Fault, Reply, Script, ScriptFile, Step
from strands_tito.testing.engine.server import LocalEngine

__all__ = [
    "DEFAULT_REPLY",
    "EngineCore",
    "EngineRecord",
    "Fault",
    "LocalEngine",
    "Reply",
    "Script",
    "ScriptFile",
    "Speculative",
    "Step",
    "routed_experts_for",
    "token_logprob",
]
