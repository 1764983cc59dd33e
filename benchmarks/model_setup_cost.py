"""What an episode pays before its tool loop: building an ``SGLangModel`` and encoding the first prompt.

RL rollouts build one model per episode (strands-env, slime), all on one tokenizer and usually one system prompt and
tool set. Measured in a fresh process per tree and round (order alternating), process CPU, median of ``--repeat``:
building a model on a tokenizer that already served one, and the first prompt of a new agent (a 1k- and an 8k-token
system prompt, one tool) once another agent started with the same system prompt and tools.

    python benchmarks/model_setup_cost.py --ref a804e83 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import ROOT, TITO_TREES, log

WORKER_CODE = """
import json, statistics, sys, time
from strands_tito import SGLangModel
from strands_tito.providers.prompt import format_tool_specs
from strands_tito.testing.tokenizers import build_qwen3_tokenizer
sys.path.insert(0, sys.argv[1])
from _turn_worker import USER_PROMPT, noop
from _harness import system_prompt_for
repeat = int(sys.argv[2])
tokenizer = build_qwen3_tokenizer()
SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer)
def cpu(fn):
    samples = []
    for _ in range(repeat):
        t = time.process_time(); fn(); samples.append(1000 * (time.process_time() - t))
    return statistics.median(samples)
out = {"build_ms": cpu(lambda: SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer))}
messages = [{"role": "user", "content": [{"text": USER_PROMPT}]}]
for size, tokens in (("1k", 1024), ("8k", 8192)):
    system = system_prompt_for(tokenizer, tokens, 200)
    model = SGLangModel(base_url="http://127.0.0.1:9", tokenizer=tokenizer)
    encoder = model._prompts
    encoder.first_prompt(messages, [noop.tool_spec], system)
    out[f"first_prompt_{size}_ms"] = cpu(lambda: encoder.first_prompt(messages, [noop.tool_spec], system))
print(json.dumps(out))
"""


def run(tree: Path | None, repeat: int) -> dict[str, float]:
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(tree / t) for t in TITO_TREES if (tree / t).is_dir())
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", WORKER_CODE, here, str(repeat)], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", required=True, help="the git ref to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="model_setup_cost-") as tmp:
        tree = Path(tmp)
        archive = subprocess.run(["git", "archive", args.ref, *TITO_TREES], capture_output=True, check=True, cwd=ROOT)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        load = [os.getloadavg()[0]]
        for round_index in range(args.rounds):
            for side in ("A", "B") if round_index % 2 == 0 else ("B", "A"):
                log(f"round {round_index + 1}/{args.rounds}: {side}")
                results[side].append(run(tree if side == "A" else None, args.repeat))
                load.append(os.getloadavg()[0])
    keys = list(results["A"][0])
    lines = [
        f"_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; A = {args.ref}, B = working tree; load average "
        f"{min(load):.1f}-{max(load):.1f}; process CPU ms, median of {args.repeat}, per round._",
        "",
        "| measure | A (per round) | B (per round) | A / B (median) |",
        "|---|---|---|---|",
    ]
    for key in keys:
        a = [r[key] for r in results["A"]]
        b = [r[key] for r in results["B"]]
        lines.append(
            f"| {key} | {', '.join(f'{x:.3f}' for x in a)} | {', '.join(f'{x:.3f}' for x in b)} | "
            f"{statistics.median(a) / statistics.median(b):.1f}x |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
