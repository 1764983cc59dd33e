"""The main job on the embedded default: the whole path on one machine.

Local SGLang-protocol engine -> an ordinary agent (:mod:`strands_tito.testing.demo_agent`, run unchanged), switched on
by environment variables only -> OTLP -> the collector -> trajectories written to JSONL -> shown, and checked token for
token against what the engine received and produced.

``strands-tito demo --chat-template FAMILY`` runs the same path on a model family's reference template (its Hugging
Face original where one was found) and tokenizer (:mod:`strands_tito.testing.family_tokenizers`): the engine serves as
``strands-tito engine --chat-template FAMILY`` does, and replies what that family's model writes (cut from its
template's own rendering of the call and the answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from strands_tito.collector import Collector, CollectorConfig
from strands_tito.providers.families import FAMILIES, family, template_defaults
from strands_tito.providers.prompt import PromptEncoder
from strands_tito.providers.rendering import render_chat_template
from strands_tito.settings import variable
from strands_tito.testing.engine import LocalEngine, Reply, Script
from strands_tito.testing.family_tokenizers import family_tokenizer
from strands_tito.testing.tokenizers import build_qwen3_tokenizer
from strands_tito.viewer import Decoder, render_text

AGENT = "strands_tito.testing.demo_agent"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 25, "b": 17}}\n</tool_call>'
DEMO_SCRIPT = Script(turns=[Reply(text=CALL), Reply(text="25 + 17 = 42.")])
_QUESTION = "What is 25 + 17? Use the add tool."
_REASONING = "The add tool gives the sum."


def _model_writes(
    tokenizer: PreTrainedTokenizerBase, name: str, before: list[dict[str, Any]], turn: list[dict[str, Any]]
) -> str:
    """What the family's model writes after ``before``: the template's rendering of ``turn`` (an assistant message and
    what follows it) after the generation prompt, up to and including the model's stop token."""
    spec = FAMILIES[name]
    kwargs = template_defaults(tokenizer.chat_template)  # as the model renders it (QwQ: enable_thinking=True)
    prompt_text = render_chat_template(tokenizer, before, add_generation_prompt=True, **kwargs)
    full_text = render_chat_template(tokenizer, [*before, *turn], add_generation_prompt=False, **kwargs)
    if full_text.startswith(prompt_text):
        rest = full_text[len(prompt_text) :]
    else:
        # The template renders the turn's start otherwise than the generation prompt: compare tokens.
        prompt = tokenizer.encode(prompt_text, add_special_tokens=False)
        full = tokenizer.encode(full_text, add_special_tokens=False)
        shared = 0
        while shared < min(len(prompt), len(full)) and prompt[shared] == full[shared]:
            shared += 1
        rest = str(tokenizer.decode(full[shared:], skip_special_tokens=False))
        if prompt[shared:] and "</think>" not in rest:
            # The generation prompt opened a think block the template does not render back: the model closes it.
            rest = f"{_REASONING}\n</think>\n\n{rest}"
    ends = [(p, t) for t in spec.stop_tokens if (p := rest.find(t)) != -1]
    if ends:
        position, token = min(ends)
        return rest[: position + len(token)]
    # The template closes the turn with a token the model does not stop on (gpt-oss <|end|>): the model stops itself.
    closing = [p for t in spec.end_of_turn if (p := rest.find(t)) != -1]
    return rest[: min(closing, default=len(rest))] + spec.stop_tokens[0]


def family_script(name: str) -> Script:
    """The demo's two replies (an ``add`` call, then the answer) as the family's model writes them."""
    name = family(name).name
    tokenizer = family_tokenizer(name)
    call_id = "functions.add:0"
    # In the form the template takes them (DeepSeek-V3.1's original concatenates JSON text), as the encoder sends them.
    arguments: Any = {"a": 25, "b": 17}
    if PromptEncoder(tokenizer).json_arguments:
        arguments = json.dumps(arguments)
    call = {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}
    asked = [{"role": "user", "content": _QUESTION}]
    calling = {"role": "assistant", "content": "", "reasoning_content": _REASONING, "tool_calls": [call]}
    result = {"role": "tool", "tool_call_id": call_id, "name": "add", "content": "42"}
    answer = {"role": "assistant", "content": "25 + 17 = 42."}
    # Without its reasoning, the call renders the same whether or not a final answer follows (templates that drop or
    # empty earlier reasoning once an answer follows would otherwise move the point where the answer starts).
    called = {key: value for key, value in calling.items() if key != "reasoning_content"}
    return Script(
        turns=[
            Reply(text=_model_writes(tokenizer, name, asked, [calling, result]), eos=False),
            Reply(text=_model_writes(tokenizer, name, [*asked, called, result], [answer]), eos=False),
        ]
    )


def _start_collector(out: Path) -> tuple[Collector, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="collector", daemon=True).start()
    config = CollectorConfig(
        store=out / "store" / "collector.db",
        outputs=[f"jsonl:{out / 'trajectories.jsonl'}"],
        http_port=0,
        grpc_port=None,
        progress_interval=0,
    )
    collector = Collector(config)
    asyncio.run_coroutine_threadsafe(collector.start(), loop).result(30)
    return collector, loop


def _assignments(variables: dict[str, str]) -> str:
    """``NAME=value ...`` as a shell line sets them."""
    return " ".join(f"{name}={shlex.quote(value)}" for name, value in variables.items())


def _command() -> str:
    """``strands-tito``, or after ``make demo`` (its .venv/bin is not on PATH) the path that works from here."""
    if shutil.which("strands-tito") is not None:
        return "strands-tito"
    return os.path.relpath(Path(sys.executable).parent / "strands-tito")


def run_demo(out: Path = Path("strands-tito-demo"), chat_template: str | None = None) -> int:
    """Run the whole path once; returns a process exit code (0 when the written trajectory is exact).

    ``chat_template`` names a model family (``glm-4.6``, ``llama-3.1``, ...) to run on instead of Qwen3.
    """
    out.mkdir(parents=True, exist_ok=True)
    output = out / "trajectories.jsonl"
    already = len(output.read_text().splitlines()) if output.exists() else 0
    name = family(chat_template).name if chat_template else None
    tokenizer = family_tokenizer(name) if name else build_qwen3_tokenizer()
    script = family_script(name) if name else DEMO_SCRIPT
    # As `strands-tito engine --chat-template FAMILY` serves: the stand-in tokenizer, the family's stop tokens.
    stops = [tokenizer.convert_tokens_to_ids(t) for t in FAMILIES[name].stop_tokens] if name else None
    collector, loop = _start_collector(out)
    try:
        with LocalEngine(tokenizer, scripts=[script], eos_token_ids=stops) as engine:  # type: ignore[arg-type]
            switches = {
                variable("capture").name: "1",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
                "OTEL_SERVICE_NAME": "strands-tito-demo",
            }
            given = {**({variable("family").name: name} if name else {}), "SGLANG_URL": engine.base_url}
            env = {**os.environ, **given, **switches}
            print(f"engine {engine.base_url}, collector http://127.0.0.1:{collector.http_port}")
            print("capture is switched on by these environment variables alone (the agent has no telemetry code):")
            print(f"  {_assignments(switches)} \\\n  {_assignments(given)} python -m {AGENT}")
            done = subprocess.run([sys.executable, "-m", AGENT], env=env, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return 1
            print(f"agent answered: {done.stdout.strip()}")
            records = [r for r in engine.records if r.path == "/generate" and r.status == 200]
        deadline = time.monotonic() + 30
        lines: list[str] = []
        while time.monotonic() < deadline:
            lines = output.read_text().splitlines() if output.exists() else []
            if len(lines) > already:
                break
            time.sleep(0.1)
    finally:
        asyncio.run_coroutine_threadsafe(collector.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
    if len(lines) <= already:
        print("no trajectory arrived at the collector", file=sys.stderr)
        return 1
    record = json.loads(lines[-1])
    print(render_text(record, Decoder(tokenizer), color=sys.stdout.isatty()))
    last = records[-1]
    exact = record["complete"] and record["token_ids"] == (last.input_ids or []) + (last.output_ids or [])
    what = f"{'a complete' if record['complete'] else 'an INCOMPLETE'} trajectory of {len(record['token_ids'])} tokens"
    if already:
        done_with = f"appended {what} to {output} (line {len(lines)} of {len(lines)}: earlier runs' lines are kept)"
    else:
        done_with = f"wrote {what} to {output}"
    print(
        f"\n{len(records)} /generate calls; the collector {done_with}, which "
        f"{'equals' if exact else 'DIFFERS FROM'} what the engine received and produced"
    )
    if name is None:
        print(f"look again with: {_command()} inspect {output} --tokenizer qwen3 --html {out / 'trajectories.html'}")
    return 0 if exact else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``strands-tito demo [--chat-template FAMILY] [--out DIR]``."""
    parser = argparse.ArgumentParser(prog="strands-tito demo", description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--chat-template", metavar="FAMILY", choices=sorted(FAMILIES), help="run on a model family's real template"
    )
    parser.add_argument("--out", type=Path, default=Path("strands-tito-demo"), help="output folder (%(default)s)")
    args = parser.parse_args(argv)
    return run_demo(args.out, args.chat_template)
