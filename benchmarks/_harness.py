"""What the client-cost benchmarks share: the workload, the engine process, the peer's virtualenv and the workers.

``client_cost.py`` (CPU time), ``call_instructions.py`` (instructions under callgrind) and ``call_steps.py`` (step
timers, a git ref against the working tree) run the same workload: a real Strands ``Agent`` driven by
``_turn_worker.py`` against the local engine in its own process, a Qwen3 tokenizer and a deterministic system prompt
per context size.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKER = HERE / "_turn_worker.py"
PEER_SPEC = "strands-sglang==0.6.2"
PEER_VERSION = "0.6.2"
SIZES = {"1k": 1024, "8k": 8192, "32k": 32768, "128k": 131072, "tool32k": 1024}
# A turn that brings in a long tool result: a 1k first prompt, then the tool returns ~32k tokens of text once.
TOOL_RESULT_TOKENS = {"tool32k": 32768}
CASE_CALLS = {"tool32k": 2}  # measured calls per episode (call 1 is the long-tool-result turn)
IMPLS = ("tito", "peer")
NAMES = {"tito": "strands-tito", "peer": "strands-sglang"}
ENGINE_CONTEXT = 160_000
DEFAULT_REPLY = '<tool_call>\n{"name": "noop", "arguments": {"x": 1}}\n</tool_call>'
# Words for the deterministic system prompt (plain English-like text tokenizes like real instructions do).
WORDS_TEXT = (
    "the agent must always check each tool result before it answers and never invent data that is missing "
    "when a value cannot be found report it clearly with the name of the source and the time of the request "
    "keep answers short use metric units prefer exact numbers over estimates cite the file path and line "
    "number for every claim about code do not repeat the question do not apologise ask for clarification "
    "only when two readings of the task lead to different actions summarise long outputs in a table"
)


def log(message: str) -> None:
    """A progress line on stderr, named after the benchmark that runs."""
    print(f"[{Path(sys.argv[0]).stem} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_peer_venv(venv: Path) -> Path:
    """Create (or reuse) the virtualenv holding strands-sglang; it is never installed next to strands-tito."""
    python = venv_python(venv)
    probe = "import importlib.metadata as m; print(m.version('strands-sglang'))"
    if python.exists():
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == PEER_VERSION:
            return python
        log(f"{venv} has no strands-sglang {PEER_VERSION}; (re)installing")
    else:
        log(f"creating {venv} with {sys.executable}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", PEER_SPEC], check=True)
    return python


def system_prompt_for(tokenizer: Any, target: int, overhead: int) -> str:
    """Deterministic instruction-like text sized so the first prompt is about ``target`` tokens."""
    import random

    rng = random.Random(target)
    words_list = WORDS_TEXT.split()
    want = max(16, target - overhead)
    sentences: list[str] = []
    ids: list[int] = []
    rule = 0
    while len(ids) < want:
        for _ in range(max(64, (want - len(ids)) // 12)):
            rule += 1
            words = [rng.choice(words_list) for _ in range(rng.randint(8, 20))]
            sentences.append(f"Rule {rule}: {' '.join(words).capitalize()}.")
        ids = tokenizer.encode("\n".join(sentences), add_special_tokens=False)
    return str(tokenizer.decode(ids[:want]))


def prepare(workdir: Path, sizes: Sequence[str]) -> tuple[Path, dict[str, Path], Path, dict[str, int]]:
    """Save the tokenizer, write one system prompt per size and the engine script; return their paths."""
    sys.path.insert(0, str(HERE))
    from _turn_worker import USER_PROMPT, noop

    from strands_tito.providers.prompt import format_tool_specs
    from strands_tito.testing.tokenizers import build_qwen3_tokenizer

    tokenizer = build_qwen3_tokenizer()
    tok_dir = workdir / "tokenizer"
    tokenizer.save_pretrained(str(tok_dir))

    def first_prompt_tokens(system: str) -> int:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": USER_PROMPT}],
            tools=format_tool_specs([noop.tool_spec]),
            add_generation_prompt=True,
            tokenize=False,
        )
        return len(tokenizer.encode(text, add_special_tokens=False))

    overhead = first_prompt_tokens("x") - 1
    prompts: dict[str, Path] = {}
    first_tokens: dict[str, int] = {}
    for size in sizes:
        text = system_prompt_for(tokenizer, SIZES[size], overhead)
        path = workdir / f"system_{size}.txt"
        path.write_text(text, encoding="utf-8")
        prompts[size] = path
        first_tokens[size] = first_prompt_tokens(text)
        if size in TOOL_RESULT_TOKENS:
            tool_text = system_prompt_for(tokenizer, TOOL_RESULT_TOKENS[size] + 7, 7)  # another seed, same kind of text
            (workdir / f"tool_{size}.txt").write_text(tool_text, encoding="utf-8")
    script = workdir / "engine_script.json"
    script.write_text(json.dumps({"scripts": [], "default": {"text": DEFAULT_REPLY}}), encoding="utf-8")
    return tok_dir, prompts, script, first_tokens


TITO_TREES = ("core", "src", "collector", "exporters")


def tito_snapshot(workdir: Path, tree: str) -> tuple[dict[str, str], str]:
    """Environment that makes strands-tito importable from a fixed tree, and a description of that tree.

    ``head``: a ``git archive`` of HEAD's package folders, put first on ``PYTHONPATH``, so that edits made to the
    working tree while the benchmark runs cannot change (or break) what is measured. ``worktree``: the files as they
    are on disk (the editable install).
    """
    env = {**os.environ, "STRANDS_TITO_CAPTURE": "0"}  # the bare model provider, never trace capture
    commit = subprocess.run(
        ["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    if tree == "worktree":
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *TITO_TREES], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
        return env, f"working tree at {commit or '?'}" + (" with uncommitted changes" if dirty else "")
    snap = workdir / "tito-head"
    snap.mkdir()
    present = [t for t in TITO_TREES if (ROOT / t).is_dir()]
    archive = subprocess.run(["git", "archive", "HEAD", *present], capture_output=True, check=True, cwd=ROOT)
    subprocess.run(["tar", "-x", "-C", str(snap)], input=archive.stdout, check=True)
    paths = [str(snap / t) for t in present]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env["PYTHONPATH"]] if env.get("PYTHONPATH") else paths)
    return env, f"commit {commit} (snapshot of HEAD)"


class Engine:
    """The local engine in its own process (its CPU is not the client's)."""

    def __init__(self, tokenizer: Path | str, script: Path, context_length: int, env: dict[str, str]) -> None:
        """``tokenizer``: a saved tokenizer's directory, or a name the engine knows (``qwen3``)."""
        self.env = env
        self.command = [
            sys.executable,
            "-m",
            "strands_tito.testing.engine",
            "--port",
            "0",
            "--tokenizer",
            str(tokenizer),
            "--script",
            str(script),
            "--context-length",
            str(context_length),
        ]
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout: float = 120.0) -> str:
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=self.env
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        for line in self.process.stdout:
            if "listening on" in line:
                self.url = line.strip().rsplit(" ", 1)[-1]
                return self.url
            if time.monotonic() > deadline:
                break
        self.stop()
        raise RuntimeError(f"engine did not start: {shlex.join(self.command)}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def run_worker(
    python: Path,
    impl: str,
    url: str,
    tok_dir: Path,
    prompt: Path,
    out: Path,
    args: argparse.Namespace,
    min_tokens: int,
    episodes: int,
    env: dict[str, str],
    breakdown: bool = False,
    extra: Sequence[str] = (),
    wrapper: Sequence[str] = (),
) -> dict[str, Any]:
    command = [
        *wrapper,
        str(python),
        str(WORKER),
        "--impl",
        impl,
        "--url",
        url,
        "--tokenizer",
        str(tok_dir),
        "--prompt-file",
        str(prompt),
        "--episodes",
        str(episodes),
        "--calls",
        str(CASE_CALLS.get(prompt.stem.removeprefix("system_"), args.calls)),
        "--min-tokens",
        str(min_tokens),
        "--out",
        str(out),
        *(["--breakdown"] if breakdown else []),
        *extra,
    ]
    env = {**env, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.worker_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"worker {impl} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def tool_args(workdir: Path, size: str) -> list[str]:
    """Worker arguments of a long-tool-result case (the text its tool returns once per episode)."""
    return ["--tool-result-file", str(workdir / f"tool_{size}.txt")] if size in TOOL_RESULT_TOKENS else []
