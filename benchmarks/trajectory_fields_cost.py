"""Cost of a trajectory's pydantic round trip, strands-tito vs strands-sglang 0.6.2's ``Rollout`` (a BaseModel).

    python benchmarks/trajectory_fields_cost.py [--sizes 1k,10k,100k] [--repeats 7] [--no-peer]

One trajectory per size: a 1k-token first prompt, then turns of 64 output tokens and 192 new prompt tokens (tool
results) until the size is reached, float logprobs everywhere but the first position, a routed-experts slice per turn
(4 layers x top-2) and one image. Both packages build it with their own calls (``append_turn`` / ``add_prompt`` +
``add_response`` + ``add_routed_experts``); then each operation runs ``--repeats`` times and the median wall time is
reported in milliseconds:

* ``model_dump``, ``model_dump(json)``, ``model_dump_json``: the trajectory's own methods;
* ``model_validate``, ``model_validate_json``: read back what the dumps wrote (strands-tito replays and checks every
  turn; 0.6.2 validates its lists);
* ``model_copy``: a copy (strands-tito's never shares a list; 0.6.2's shallow copy shares them), and with
  ``update={"routed_experts": ...}`` (strands-tito rebuilds and checks);
* ``field dump_json`` / ``field validate_json``: as a field of a pydantic model (strands-env's ``RolloutResult``, the
  Ray transport).

strands-sglang runs in ``benchmarks/.venv-peer`` (see ``_harness.py``), this same script as its worker.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}
FIRST_PROMPT, OUTPUT, TOOL = 1_000, 64, 192
LAYERS, TOP_K = 4, 2
IMAGE = "data:image/png;base64," + base64.b64encode(bytes(range(48))).decode()


def turns_for(size: int) -> list[tuple[list[int], list[int]]]:
    """(new prompt, output) per turn, ids and lengths deterministic."""
    turns, total, prompt = [], 0, FIRST_PROMPT
    while total < size:
        prompt = min(prompt, size - total - 1)
        output = min(OUTPUT, size - total - prompt)
        turns.append((list(range(total, total + prompt)), list(range(total + prompt, total + prompt + output))))
        total += prompt + output
        prompt = TOOL
    return turns


def logprobs(ids: list[int], first: bool) -> list[float | None]:
    values: list[float | None] = [-((i % 97) + 1) / 64 for i in ids]
    if first:
        values[0] = None
    return values


def routing(rows: int) -> str:
    import numpy as np

    return base64.b64encode(np.arange(rows * LAYERS * TOP_K, dtype="<i4").tobytes()).decode()


def build(impl: str, size: int) -> Any:
    turns = turns_for(size)
    if impl == "tito":
        from strands_tito.trajectory import Trajectory

        t = Trajectory()
        for k, (prompt, output) in enumerate(turns):
            rows = len(prompt) + len(output) - (1 if k == 0 else 0)
            t.append_turn(
                prompt,
                output,
                finish_reason="stop",
                prompt_logprobs=logprobs(prompt, k == 0),
                output_logprobs=logprobs(output, False),
                routed_experts=routing(rows),
                image_data=[IMAGE] if k == 0 else (),
            )
        return t
    from strands_sglang import Rollout

    r = Rollout()
    for k, (prompt, output) in enumerate(turns):
        r.add_prompt(prompt, logprobs(prompt, k == 0))
        r.add_response(output, logprobs(output, False))
        r.add_routed_experts(routing(len(prompt) + len(output) - (1 if k == 0 else 0)))
    r.image_data = [IMAGE]
    return r


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(impl: str, size: int, repeats: int) -> dict[str, float]:
    from pydantic import BaseModel

    if impl == "tito":
        from strands_tito.trajectory import Trajectory as Rollout
    else:
        from strands_sglang import Rollout  # type: ignore[no-redef]

    class RolloutResult(BaseModel):
        rollout: Rollout | None = None
        reward: float = 0.0

    t = build(impl, size)
    dumped, text = t.model_dump(), t.model_dump_json()
    assert len(text) > size  # the whole trajectory is in it
    result = RolloutResult(rollout=t)
    result_json = result.model_dump_json()
    update = {"routed_experts": list(t.routed_experts)}
    loaded = Rollout.model_validate_json(text)
    assert loaded.token_ids == t.token_ids and loaded.logprobs == t.logprobs
    return {
        "tokens": float(len(t.token_ids)),
        "model_dump": median_ms(t.model_dump, repeats),
        "model_dump(json)": median_ms(lambda: t.model_dump(mode="json"), repeats),
        "model_dump_json": median_ms(t.model_dump_json, repeats),
        "model_validate": median_ms(lambda: Rollout.model_validate(dumped), repeats),
        "model_validate_json": median_ms(lambda: Rollout.model_validate_json(text), repeats),
        "model_copy": median_ms(t.model_copy, repeats),
        "model_copy(update)": median_ms(lambda: t.model_copy(update=update), repeats),
        "field dump_json": median_ms(result.model_dump_json, repeats),
        "field validate_json": median_ms(lambda: RolloutResult.model_validate_json(result_json), repeats),
        "json MB": len(text) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1k,10k,100k")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-peer", action="store_true", help="strands-tito only")
    parser.add_argument("--worker", choices=["tito", "peer"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [SIZES[s] for s in args.sizes.split(",")]
    if args.worker:
        print(json.dumps({size: measure(args.worker, size, args.repeats) for size in sizes}))
        return

    from _harness import HERE, ensure_peer_venv
    from _machine import describe

    results = {"tito": {str(k): v for k, v in ((s, measure("tito", s, args.repeats)) for s in sizes)}}
    if not args.no_peer:
        python = ensure_peer_venv(HERE / ".venv-peer")
        command = [str(python), __file__, "--worker", "peer", "--sizes", args.sizes, "--repeats", str(args.repeats)]
        results["peer"] = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    operations = [k for k in next(iter(results["tito"].values())) if k not in ("tokens", "json MB")]
    print(f"Machine: {describe()}; median of {args.repeats}, milliseconds\n")
    names = {"tito": "strands-tito", "peer": "strands-sglang 0.6.2"}
    print("| operation | " + " | ".join(f"{size:,} tokens: {names[name]}" for size in sizes for name in results) + " |")
    print("|" + "---|" * (1 + len(sizes) * len(results)))
    for op in operations:
        cells = [f"{results[name][str(size)][op]:.2f}" for size in sizes for name in results]
        print(f"| {op} | " + " | ".join(cells) + " |")
    json_sizes = [f"{results[name][str(size)]['json MB']:.2f}" for size in sizes for name in results]
    print("| JSON size (MB) | " + " | ".join(json_sizes) + " |")


if __name__ == "__main__":
    main()
