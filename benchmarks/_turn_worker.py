"""One benchmark worker: runs agent episodes against a running engine and reports per-call client CPU.

Runs in either virtualenv: ``--impl tito`` (strands-tito, the project venv) or ``--impl peer``
(strands-sglang 0.6.2, ``benchmarks/.venv-peer``). Started by ``benchmarks/client_cost.py``; it only imports
what the chosen implementation needs, plus strands and transformers.

Per episode: a fresh Strands ``Agent`` (one tool ``noop``, ``NullConversationManager``, no callback handler) whose
model replies with a hermes tool call every time (the engine's default reply), stopped by the package's own
limiter after ``calls + 1`` tool turns. Model call ``i`` is timed from the first to the last step of
``model.stream`` (process CPU and wall); turn ``i`` is timed from the start of call ``i`` to the start of call
``i + 1`` (the model call plus Strands' tool execution and event-loop overhead). The extra last call only closes
the last measured turn and is not reported.

The result is one JSON object written to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import inspect
import json
import sys
import time
from array import array
from pathlib import Path
from typing import Any

from _callgrind import MARK, MARK_FUNCTION
from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from transformers import AutoTokenizer

USER_PROMPT = "Call the noop tool with x=1 and keep calling it until you are stopped."
# Calls whose request body is serialized (after the episode) to report bytes sent.
BYTES_SAMPLE = (1, 15, 29)


# The text the tool returns once per episode (its first call) when --tool-result-file is given: a turn that brings
# in a long tool result (a file or a web page read by the agent). Every other call returns "ok".
LONG_RESULT: dict[str, str | None] = {"text": None, "pending": None}


@tool
def noop(x: int) -> str:
    """Do nothing and report success.

    Args:
        x: Any integer.
    """
    pending = LONG_RESULT["pending"]
    if pending is not None:
        LONG_RESULT["pending"] = None
        return pending
    return "ok"


class Probe:
    """Wraps ``model.stream`` and the HTTP layer of one model to time calls and capture requests."""

    def __init__(self) -> None:
        # Called at the start and at the end of each model call when set (``--mark-calls``: callgrind's dump marks).
        self.mark: Any = None
        self.calls: list[dict[str, float]] = []
        self.last_request: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.sampled: dict[int, dict[str, Any]] = {}
        self.prompt_lens: list[int] = []

    def wrap_stream(self, model: Any) -> None:
        original = model.stream
        probe = self

        async def timed(agen: Any) -> Any:
            if probe.mark is not None:
                probe.mark()
            record = {"c0": time.process_time(), "w0": time.perf_counter()}
            probe.calls.append(record)
            async for event in agen:
                yield event
            record["c1"] = time.process_time()
            record["w1"] = time.perf_counter()
            if probe.mark is not None:
                probe.mark()

        def stream(*args: Any, **kwargs: Any) -> Any:
            return timed(original(*args, **kwargs))

        model.stream = stream

    def note(self, payload: dict[str, Any], reply: dict[str, Any]) -> None:
        self.last_request = (payload, reply)
        self.prompt_lens.append(len(payload["input_ids"]))
        index = len(self.calls) - 1
        if index in BYTES_SAMPLE:
            self.sampled[index] = payload

    def timed_attr(self, owner: Any, name: str, label: str) -> None:
        """Accumulate the process CPU of ``owner.name`` (sync or async) into the current call's record.

        Missing attributes are skipped (the breakdown is best effort across versions of the packages).
        """
        original = getattr(owner, name, None)
        if original is None:
            print(f"breakdown: {owner!r} has no {name}; not timed", file=sys.stderr)
            return
        probe = self

        def account(start: float) -> None:
            if probe.calls:
                record = probe.calls[-1]
                record[label] = record.get(label, 0.0) + time.process_time() - start

        if inspect.iscoroutinefunction(original):

            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.process_time()
                try:
                    return await original(*args, **kwargs)
                finally:
                    account(start)

            setattr(owner, name, async_wrapper)
        else:

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.process_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    account(start)

            setattr(owner, name, wrapper)

    def time_gc(self) -> None:
        """Accumulate garbage-collection CPU per call (``gc`` for the model call, ``gc_turn`` for the whole turn)."""
        probe = self
        started: list[float] = []

        def callback(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[:] = [time.process_time()]
            elif started and probe.calls:
                record = probe.calls[-1]
                spent = time.process_time() - started[0]
                key = "gc" if "c1" not in record else "gc_after_call"
                record[key] = record.get(key, 0.0) + spent

        gc.callbacks.append(callback)

    def reset(self) -> None:
        self.calls = []
        self.last_request = None
        self.sampled = {}
        self.prompt_lens = []


# -- implementations --------------------------------------------------------------------------------------------


def build_tito(url: str, tokenizer: Any, max_new_tokens: int, probe: Probe, breakdown: bool) -> dict[str, Any]:
    import orjson

    from strands_tito import SGLangClient, SGLangModel, ToolLimiter, ToolLimitReachedError

    client = SGLangClient(url)
    model = SGLangModel(client=client, tokenizer=tokenizer, sampling_params={"max_new_tokens": max_new_tokens})
    original = client.generate

    async def generate(input_ids: list[int], **kwargs: Any) -> dict[str, Any]:
        reply = await original(input_ids, **kwargs)
        # The body's input_ids: the client sends the same ids as a pre-serialized fragment (input_ids_json).
        kwargs.pop("input_ids_json", None)
        kwargs.pop("cancel_signal", None)
        probe.note({"input_ids": input_ids, **kwargs, "stream": False}, reply)
        return reply

    client.generate = generate  # type: ignore[method-assign]

    def trajectory_ids() -> list[int]:
        return model.token_manager.token_ids

    def check() -> int:
        trajectory = model.token_manager
        payload, reply = probe.last_request  # type: ignore[misc]
        sent = payload["input_ids"]
        last = trajectory.turns[-1]
        assert last.prompt_start + last.prompt_length == len(sent), "last turn does not end where the request did"
        assert trajectory.token_ids[: len(sent)] == sent, "trajectory prefix differs from the last request"
        assert trajectory.token_ids[len(sent) :] == reply["output_ids"], "trajectory output differs from the reply"
        assert len(trajectory.token_ids) == len(sent) + last.output_length
        return len(trajectory.turns)

    if breakdown:
        from strands_tito import trajectory
        from strands_tito.providers import sglang

        probe.timed_attr(model, "_prompt_ids", "tokenize")
        probe.timed_attr(model, "_context_limit", "context_limit")
        probe.timed_attr(client, "request_json", "http")  # orjson encode, httpx round trip, orjson decode
        probe.timed_attr(sglang, "_parse_reply", "parse_reply")
        probe.timed_attr(trajectory.Trajectory, "append_turn", "record")
        probe.timed_attr(model.tool_parser, "parse", "tool_parse")
    return {
        "model": model,
        "limiter": lambda n: ToolLimiter(max_tool_iters=n),
        "limit_error": ToolLimitReachedError,
        # The client sends the ids as the trajectory's JSON fragment; the request's input_ids are a read-only view.
        "body_bytes": lambda payload: len(orjson.dumps({**payload, "input_ids": list(payload["input_ids"])})),
        "trajectory_ids": trajectory_ids,
        "check": check,
        "reset": model.reset,
        "versions": {"strands-tito": _dist_version("strands-tito")},
    }


def build_peer(url: str, tokenizer: Any, max_new_tokens: int, probe: Probe, breakdown: bool) -> dict[str, Any]:
    from strands_sglang import LoopLimiter, LoopLimitReachedError, SGLangClient, SGLangModel
    from strands_sglang.tool_parsers import HermesToolParser

    client = SGLangClient(url)
    model = SGLangModel(
        client=client,
        tokenizer=tokenizer,
        tool_parser=HermesToolParser(),
        sampling_params={"max_new_tokens": max_new_tokens},
    )
    original = client.generate

    async def generate(input_ids: list[int], **kwargs: Any) -> dict[str, Any]:
        reply = await original(input_ids, **kwargs)
        # The body aiohttp sends for json=payload (json.dumps, UTF-8); rebuilt here as client.generate does.
        probe.note({"input_ids": input_ids, **kwargs, "stream": False}, reply)
        return reply

    client.generate = generate  # type: ignore[method-assign]

    def trajectory_ids() -> list[int]:
        return model.rollout.token_ids

    def check() -> int:
        rollout = model.rollout
        payload, reply = probe.last_request  # type: ignore[misc]
        sent = payload["input_ids"]
        assert rollout.token_ids[: len(sent)] == sent, "rollout prefix differs from the last request"
        assert rollout.token_ids[len(sent) :] == reply["output_ids"], "rollout output differs from the reply"
        return sum(1 for is_output, _ in rollout.segment_info if is_output)

    def reset() -> None:
        model.reset()
        model.rollout_history.clear()  # neither implementation keeps finished episodes around in this benchmark

    if breakdown:
        from strands_sglang.rollout import Rollout

        probe.timed_attr(model, "tokenize_prompt_messages", "tokenize")
        probe.timed_attr(client, "max_model_len", "context_limit")
        probe.timed_attr(client, "is_multimodal", "context_limit")
        probe.timed_attr(client, "generate", "http")  # json.dumps, aiohttp round trip, json decode
        probe.timed_attr(Rollout, "add_prompt", "record")
        probe.timed_attr(Rollout, "add_response", "record")
        probe.timed_attr(model.tool_parser, "parse", "tool_parse")
    return {
        "model": model,
        "limiter": lambda n: LoopLimiter(max_tool_iters=n),
        "limit_error": LoopLimitReachedError,
        "body_bytes": lambda payload: len(json.dumps(payload).encode()),
        "trajectory_ids": trajectory_ids,
        "check": check,
        "reset": reset,
        "versions": {"strands-sglang": _dist_version("strands-sglang")},
    }


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


# -- episodes -----------------------------------------------------------------------------------------------------


async def run_episode(impl: dict[str, Any], probe: Probe, system_prompt: str, calls: int) -> dict[str, Any]:
    """One episode of ``calls`` measured model calls plus one that closes the last turn."""
    impl["reset"]()
    probe.reset()
    LONG_RESULT["pending"] = LONG_RESULT["text"]
    agent = Agent(
        model=impl["model"],
        tools=[noop],
        system_prompt=system_prompt,
        callback_handler=None,
        conversation_manager=NullConversationManager(),
        hooks=[impl["limiter"](calls + 1)],
    )
    w_start = time.perf_counter()
    c_start = time.process_time()
    try:
        await agent.invoke_async(USER_PROMPT)
    except Exception as e:
        if not _caused_by(e, impl["limit_error"]):
            raise
    else:
        raise RuntimeError("the agent stopped before the limiter did (did the engine stop calling the tool?)")
    c_end = time.process_time()
    w_end = time.perf_counter()

    made = len(probe.calls)
    if made != calls + 1:
        raise RuntimeError(f"expected {calls + 1} model calls, got {made}")
    turns_recorded = impl["check"]()
    if turns_recorded != calls + 1:
        raise RuntimeError(f"trajectory holds {turns_recorded} turns, expected {calls + 1}")
    token_ids = impl["trajectory_ids"]()
    total_tokens = len(token_ids)
    digest = hashlib.sha1(array("q", token_ids).tobytes()).hexdigest()[:16]

    records = probe.calls
    out_calls = []
    for i in range(calls):
        this, nxt = records[i], records[i + 1]
        row = {
            "call_cpu": this["c1"] - this["c0"],
            "call_wall": this["w1"] - this["w0"],
            "turn_cpu": nxt["c0"] - this["c0"],
            "turn_wall": nxt["w0"] - this["w0"],
        }
        parts = {k: v for k, v in this.items() if k not in ("c0", "c1", "w0", "w1")}
        if parts:
            row["parts"] = parts
        out_calls.append(row)
    sampled = {
        str(i): {"bytes": impl["body_bytes"](payload), "input_ids": len(payload["input_ids"])}
        for i, payload in probe.sampled.items()
    }
    del agent
    return {
        "calls": out_calls,
        "episode_cpu": c_end - c_start,
        "episode_wall": w_end - w_start,
        "total_tokens": total_tokens,
        "digest": digest,
        "sampled": sampled,
        "prompt_tokens": probe.prompt_lens[:calls],
    }


async def concurrent_throughput(args: argparse.Namespace, tokenizer: Any, system_prompt: str) -> dict[str, Any]:
    """``--agents K`` agents in this one process at once, each with its own model, all sharing one client.

    Returns the model calls made and the process CPU (all threads) and wall time they took: calls per CPU-second.
    """
    agents = args.agents
    sampling = {"max_new_tokens": args.max_new_tokens}
    if args.impl == "tito":
        from strands_tito import SGLangClient, SGLangModel, ToolLimiter, ToolLimitReachedError

        client: Any = SGLangClient(args.url, max_connections=max(agents, 8))

        def make_model() -> Any:
            return SGLangModel(client=client, tokenizer=tokenizer, sampling_params=sampling)

        limiter: Any = ToolLimiter
        limit_error: Any = ToolLimitReachedError
    else:
        from strands_sglang import LoopLimiter, LoopLimitReachedError
        from strands_sglang import SGLangClient as PeerClient
        from strands_sglang import SGLangModel as PeerModel
        from strands_sglang.tool_parsers import HermesToolParser

        client = PeerClient(args.url, max_connections=max(agents, 8))

        def make_model() -> Any:
            return PeerModel(
                client=client, tokenizer=tokenizer, tool_parser=HermesToolParser(), sampling_params=sampling
            )

        limiter, limit_error = LoopLimiter, LoopLimitReachedError
    made = [0]

    async def one_agent(calls: int) -> None:
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

    await asyncio.gather(*(one_agent(3) for _ in range(min(agents, 4))))  # warm-up
    gc.collect()
    made[0] = 0
    waves = max(1, args.min_calls // (agents * (args.calls + 1)))
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(waves):
        await asyncio.gather(*(one_agent(args.calls) for _ in range(agents)))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"agents": agents, "waves": waves, "calls": made[0], "cpu": cpu, "wall": wall}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    system_prompt = Path(args.prompt_file).read_text(encoding="utf-8")
    if args.tool_result_file:
        LONG_RESULT["text"] = Path(args.tool_result_file).read_text(encoding="utf-8")
    if args.agents:
        concurrent = await concurrent_throughput(args, tokenizer, system_prompt)
        return {"impl": args.impl, "concurrent": concurrent, "versions": {}, "python": sys.version.split()[0]}
    probe = Probe()
    build = build_tito if args.impl == "tito" else build_peer
    impl = build(args.url, tokenizer, args.max_new_tokens, probe, args.breakdown)
    probe.wrap_stream(impl["model"])
    if args.breakdown:
        probe.time_gc()

    # Warm-up: imports, connection pool, cached server info, cached template pieces, first-call paths.
    await run_episode(impl, probe, system_prompt, args.warmup_calls)
    gc.collect()
    if args.mark_calls:
        probe.mark = MARK

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    episodes = []
    for _ in range(args.episodes):
        episode = await run_episode(impl, probe, system_prompt, args.calls)
        if episode["total_tokens"] <= args.min_tokens:
            raise RuntimeError(f"trajectory has {episode['total_tokens']} tokens, expected > {args.min_tokens}")
        episodes.append(episode)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)

    import strands
    import transformers

    versions = {
        "strands-agents": _dist_version("strands-agents"),
        "transformers": transformers.__version__,
        **impl["versions"],
    }
    del strands
    return {"impl": args.impl, "episodes": episodes, "versions": versions, "python": sys.version.split()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", choices=("tito", "peer"), required=True)
    parser.add_argument("--url", required=True, help="engine base URL")
    parser.add_argument("--tokenizer", required=True, help="local Hugging Face tokenizer directory")
    parser.add_argument("--prompt-file", required=True, help="system prompt text")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--calls", type=int, default=30, help="measured model calls per episode (first included)")
    parser.add_argument("--warmup-calls", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--min-tokens", type=int, default=0, help="fail if a trajectory is not longer than this")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--breakdown", action="store_true", help="also time the pieces of each model call (tokenize, http, ...)"
    )
    parser.add_argument("--tool-result-file", help="text the tool returns on its first call of each episode")
    parser.add_argument("--agents", type=int, default=0, help="concurrent mode: this many agents at once")
    parser.add_argument("--min-calls", type=int, default=0, help="concurrent mode: repeat waves up to this many calls")
    parser.add_argument("--profile", metavar="FILE.pstats", help="cProfile the measured episodes (slows them down)")
    parser.add_argument(
        "--mark-calls",
        action="store_true",
        help=f"call {MARK_FUNCTION}() at the start and end of each measured model call (for call_instructions.py)",
    )
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
