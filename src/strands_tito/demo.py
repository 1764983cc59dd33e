"""The main job on the embedded default: the whole path on one machine.

Local SGLang-protocol engine -> an unchanged example agent (``examples/capture_agent.py``), switched on by
environment variables only -> OTLP -> the collector -> trajectories written to JSONL -> shown, and checked token for
token against what the engine received and produced.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from .collector import Collector, CollectorConfig
from .engine import LocalEngine, Reply, Script
from .tokenizers import build_qwen3_tokenizer
from .viewer import Decoder, render_text

AGENT = Path(__file__).resolve().parents[2] / "examples" / "capture_agent.py"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 25, "b": 17}}\n</tool_call>'
DEMO_SCRIPT = Script(turns=[Reply(text=CALL), Reply(text="25 + 17 = 42.")])


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


def run_demo(out: Path = Path("strands-tito-demo")) -> int:
    """Run the whole path once; returns a process exit code (0 when the written trajectory is exact)."""
    if not AGENT.exists():
        print(f"strands-tito demo needs the repository's examples/ folder ({AGENT} not found)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    output = out / "trajectories.jsonl"
    already = len(output.read_text().splitlines()) if output.exists() else 0
    tokenizer = build_qwen3_tokenizer()
    collector, loop = _start_collector(out)
    try:
        with LocalEngine(tokenizer, scripts=[DEMO_SCRIPT]) as engine:
            env = {
                **os.environ,
                "SGLANG_URL": engine.base_url,
                "STRANDS_TITO_CAPTURE": "1",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.http_port}",
                "OTEL_SERVICE_NAME": "strands-tito-demo",
            }
            print(f"engine {engine.base_url}, collector http://127.0.0.1:{collector.http_port}; running {AGENT.name}")
            done = subprocess.run([sys.executable, str(AGENT)], env=env, capture_output=True, text=True, timeout=300)
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
    print(
        f"\n{len(records)} /generate calls; the collector wrote a {'complete' if record['complete'] else 'INCOMPLETE'}"
        f" trajectory of {len(record['token_ids'])} tokens to {output}, which "
        f"{'equals' if exact else 'DIFFERS FROM'} what the engine received and produced"
    )
    print(f"look again with: strands-tito inspect {output} --tokenizer qwen3 --html {out / 'trajectories.html'}")
    return 0 if exact else 1


def main() -> int:
    """Entry point of ``strands-tito demo``."""
    return run_demo()
