"""One worker of ``concurrency_cost.py``: K real Strands agents at once in this process, and what they cost.

``--impl``:

- ``tito``: strands-tito's ``SGLangModel`` (project venv); ``capture`` is the same with trace capture switched on by
  the environment the orchestrator sets (``STRANDS_TITO_CAPTURE=1``, spans exported over OTLP to a sink);
- ``peer``: strands-sglang 0.6.2's ``SGLangModel`` (``benchmarks/.venv-peer``);
- ``floor``: a minimal Strands ``Model`` that yields the same stream events as the others for the engine's reply (one
  hermes tool call ``noop(x=1)``), with no HTTP and no tokenizer: what Strands' own agent loop costs per call.

Every agent has its own model (one per episode, as strands-env and slime build them), all share one client; each
agent makes ``--calls`` tool-loop calls plus the one its limiter stops. Waves of ``--agents`` agents run under
``asyncio.gather`` until at least ``--min-calls`` calls. Reported (JSON on ``--out``): calls, process CPU (all
threads) and wall time of the waves, the trajectories' digests (so the orchestrator checks that both packages produced
the same tokens), and the growth of peak RSS over the resident set before the waves (peak RSS per agent).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import sys
import time
from array import array
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from strands.models.model import Model

USER_PROMPT = "Call the noop tool with x=1 and keep calling it until you are stopped."


@tool
def noop(x: int) -> str:
    """Do nothing and report success.

    Args:
        x: Any integer.
    """
    return "ok"


class FloorModel(Model):
    """A Strands ``Model`` yielding the events the token providers yield for one ``noop(x=1)`` call; nothing else."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.calls = 0

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    async def structured_output(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - not used
        raise NotImplementedError
        yield  # an async generator, as the interface wants

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.calls += 1
        yield {"messageStart": {"role": "assistant"}}
        await asyncio.sleep(0)  # the providers wait for the engine's reply here
        yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"call_{self.calls}", "name": "noop"}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"x": 1})}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}
        usage = {"inputTokens": 1024, "outputTokens": 20, "totalTokens": 1044, "cacheReadInputTokens": 0}
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}


def _memory(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    # Linux: writing 5 to clear_refs resets the peak resident set size (VmHWM) to the current one.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def build(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """The model factory, limiter class, limit error and a function returning a finished model's token ids."""
    sampling = {"max_new_tokens": args.max_new_tokens}
    if args.impl in ("tito", "capture"):
        from transformers import AutoTokenizer

        from strands_tito import SGLangClient, SGLangModel, ToolLimiter, ToolLimitReachedError

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
        client: Any = SGLangClient(args.url, max_connections=max(args.agents, 8))

        def make_tito() -> Any:
            return SGLangModel(client=client, tokenizer=tokenizer, sampling_params=sampling)

        return make_tito, ToolLimiter, ToolLimitReachedError, lambda m: m.trajectory.token_ids
    if args.impl == "peer":
        from strands_sglang import LoopLimiter, LoopLimitReachedError, SGLangClient, SGLangModel
        from strands_sglang.tool_parsers import HermesToolParser
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
        peer_client: Any = SGLangClient(args.url, max_connections=max(args.agents, 8))

        def make_peer() -> Any:
            return SGLangModel(
                client=peer_client, tokenizer=tokenizer, tool_parser=HermesToolParser(), sampling_params=sampling
            )

        return make_peer, LoopLimiter, LoopLimitReachedError, lambda m: m.rollout.token_ids
    from strands_tito import ToolLimiter, ToolLimitReachedError

    return FloorModel, ToolLimiter, ToolLimitReachedError, lambda m: None


async def run(args: argparse.Namespace) -> dict[str, Any]:
    make_model, limiter, limit_error, token_ids = build(args)
    system_prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    made = [0]
    digests: Counter[str] = Counter()

    async def one_agent(calls: int, keep: bool) -> None:
        model = make_model()
        original = model.stream

        def stream(*a: Any, **k: Any) -> Any:
            made[0] += 1
            return original(*a, **k)

        model.stream = stream
        agent = Agent(
            model=model,
            tools=[noop],
            system_prompt=system_prompt,
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            hooks=[limiter(max_tool_iters=calls)],
        )
        try:
            await agent.invoke_async(USER_PROMPT)
        except Exception as e:
            if not _caused_by(e, limit_error):
                raise
        else:
            raise RuntimeError("the agent stopped before its limiter did")
        ids = token_ids(model)
        if keep and ids is not None:
            digests[hashlib.sha1(array("q", ids).tobytes()).hexdigest()[:16]] += 1

    await asyncio.gather(*(one_agent(3, False) for _ in range(min(args.agents, 4))))  # warm-up
    gc.collect()
    made[0] = 0
    waves = max(1, args.min_calls // (args.agents * (args.calls + 1)))
    rss_before = _memory("VmRSS")
    _reset_peak()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(waves):
        await asyncio.gather(*(one_agent(args.calls, True) for _ in range(args.agents)))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    if args.impl == "capture":
        from opentelemetry import trace

        provider: Any = trace.get_tracer_provider()
        c1 = time.process_time()
        if hasattr(provider, "force_flush"):
            provider.force_flush()
        cpu += time.process_time() - c1  # the exporter's work for these spans is part of the cost
    peak = _memory("VmHWM")
    return {
        "impl": args.impl,
        "agents": args.agents,
        "waves": waves,
        "calls": made[0],
        "cpu": cpu,
        "wall": wall,
        "digests": dict(digests),
        "rss_before_kib": rss_before,
        "peak_kib": peak,
        "python": sys.version.split()[0],
        "prompt_file": Path(args.prompt_file).name,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", choices=("tito", "capture", "peer", "floor"), required=True)
    parser.add_argument("--url", default="")
    parser.add_argument("--tokenizer", default="")
    parser.add_argument("--prompt-file", required=True)
    parser.add_argument("--agents", type=int, required=True)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--min-calls", type=int, default=72)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
