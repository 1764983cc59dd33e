"""How the trajectory viewer copes with many long trajectories (``strands-tito view`` and the written page).

Writes N synthetic records of L tokens each (the real Qwen3 vocabulary, three turns, logprobs on every output token)
to a JSONL file, then measures: building the served index (the one pass over the file ``strands-tito view`` makes at
start, with its peak memory), answering one trajectory (``GET /t/N``: the line read again, each token decoded), and,
in headless Chromium (scripts/browser.sh installs it), loading the served page and rendering one trajectory of L
tokens. Also the size a written page (``inspect --html``) would take per trajectory.

``--baseline REF`` also builds the served index with ``src/strands_tito/html_view.py`` as it is at the git revision
REF, on the same file, alternating with today's (``--rounds`` each), and prints both and their ratio.

    python benchmarks/viewer_scale.py [--trajectories 1000] [--tokens 32768] [--baseline main] [--no-browser]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from _machine import describe

from strands_tito.html_view import TokenTexts, TrajectoryIndex, serve, trajectory_payload
from strands_tito.testing.tokenizers import build_qwen3_tokenizer
from strands_tito.viewer import Decoder


def synthetic_record(number: int, tokens: int, rng: random.Random) -> str:
    third = tokens // 3
    draw = np.random.default_rng(number)
    ids = draw.integers(0, 150_000, tokens).tolist()
    mask = [0] * third + [1] * third + [0] * (tokens - 3 * third) + [1] * third
    mask = (mask + [1] * tokens)[:tokens]
    values = np.round(-draw.random(tokens) * 3, 4).tolist()
    logprobs = [v if m else None for v, m in zip(values, mask, strict=True)]
    turns = [
        {"index": 0, "prompt_start": 0, "prompt_length": third, "output_length": third, "finish_reason": "stop"},
        {"index": 1, "prompt_start": 2 * third, "prompt_length": 0, "output_length": tokens - 2 * third,
         "finish_reason": "length"},
    ]  # fmt: skip
    record = {
        "trajectory_id": f"t-{number:05d}", "complete": number % 17 != 0, "reason": None if number % 17 else "lost",
        "model_id": "qwen3", "reward": rng.random(), "token_ids": ids, "loss_mask": mask, "logprobs": logprobs,
        "segments": [[0, third], [1, tokens - third]], "turns": turns,
    }  # fmt: skip
    return json.dumps(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--baseline", help="git revision whose served index to time side by side (e.g. main)")
    parser.add_argument("--rounds", type=int, default=1, help="index passes of each, alternating")
    parser.add_argument("--no-browser", action="store_true", help="skip the headless Chromium steps")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="viewer-scale-"))
    try:
        data = folder / "t.jsonl"
        rng = random.Random(0)
        started = time.perf_counter()
        with data.open("w") as handle:
            for number in range(args.trajectories):
                handle.write(synthetic_record(number, args.tokens, rng) + "\n")
        written = time.perf_counter() - started
        size_mb = data.stat().st_size / 2**20

        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        baseline = _module_at(args.baseline, folder) if args.baseline else None
        today: list[float] = []
        before: list[float] = []
        for round_number in range(args.rounds):  # alternating which goes first, so that load changes touch both alike
            if baseline is not None and round_number % 2 == 0:
                before.append(_time_index(baseline.TrajectoryIndex, data))
            today.append(_time_index(TrajectoryIndex, data))
            if baseline is not None and round_number % 2 == 1:
                before.append(_time_index(baseline.TrajectoryIndex, data))
        index = TrajectoryIndex(data)
        index_s = statistics.median(today)
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        decode = Decoder(build_qwen3_tokenizer())
        texts = TokenTexts(decode)
        started = time.perf_counter()
        payload = trajectory_payload(index.record(args.trajectories // 2), texts)
        body = json.dumps(payload).encode()
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        trajectory_payload(index.record(args.trajectories // 2 + 1), texts)
        second_s = time.perf_counter() - started

        browser = {} if args.no_browser else measure_browser(data, decode, args.trajectories // 2)
        print(f"{describe()}; load average (1 min) at start / end: {load:.2f} / {os.getloadavg()[0]:.2f}")
        print(
            f"\n{args.trajectories} trajectories x {args.tokens:,} tokens: JSONL {size_mb:,.0f} MB ({written:.1f} s)\n"
        )
        print("| step | time | note |")
        print("|---|---|---|")
        rss = f"peak RSS {rss_before:,.0f} -> {rss_after:,.0f} MiB"
        passes = " / ".join(f"{t:.1f}" for t in today)
        print(f"| served index (one pass over the file) | {index_s:.1f} s | {rss}; passes {passes} s |")
        if baseline is not None:
            old = statistics.median(before)
            passes = " / ".join(f"{t:.1f}" for t in before)
            ratio = f"today / {args.baseline} = {index_s / old:.2f}"
            print(f"| served index at {args.baseline}, same file | {old:.1f} s | passes {passes} s; {ratio} |")
        payload_mb = f"{len(body) / 2**20:.1f} MB JSON; token texts cached per id"
        times = f"{first_s * 1000:.0f} / {second_s * 1000:.0f} ms"
        print(f"| one trajectory's payload, first / next | {times} | {payload_mb} |")
        for step, value in browser.items():
            print(f"| {step} | {value} | headless Chromium |")
        print(f"| written page (inspect --html) | - | about {len(body) / 2**20:.1f} MB per trajectory embedded |")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _module_at(revision: str, folder: Path) -> ModuleType:
    """``strands_tito/html_view.py`` as it is at git ``revision``, loaded as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:src/strands_tito/html_view.py"], check=True, capture_output=True, text=True
    ).stdout
    path = folder / "html_view_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("html_view_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time_index(index_type: Any, data: Path) -> float:
    started = time.perf_counter()
    index_type(data)
    return time.perf_counter() - started


def measure_browser(data: Path, decode: Decoder, number: int) -> dict[str, str]:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        return {"browser": "skipped: no chromium/chromedriver"}
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    server = serve(data, decode, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        started = time.perf_counter()
        driver.get(f"http://127.0.0.1:{server.server_port}/")
        driver.find_element(By.CSS_SELECTOR, "tr.row")
        page_s = time.perf_counter() - started
        started = time.perf_counter()
        driver.find_element(By.ID, "search").send_keys("t-0099")
        search_s = time.perf_counter() - started
        driver.find_element(By.ID, "search").clear()
        driver.execute_script("drawIndex()")
        script = (
            "const done = arguments[0], t0 = performance.now();"
            f"open({number}).then(() => requestAnimationFrame(() => done(performance.now() - t0)));"
        )
        driver.set_script_timeout(300)
        first_ms = driver.execute_async_script(script)  # fetch, parse, render every token, first layout
        again_ms = driver.execute_async_script(script)  # already fetched: render and layout only
        return {
            "page load with the whole index": f"{page_s:.1f} s",
            "search (typing 6 characters)": f"{search_s:.2f} s",
            "open one trajectory: fetch + render + layout / render + layout again": f"{first_ms / 1000:.2f} / "
            f"{again_ms / 1000:.2f} s",
        }
    finally:
        driver.quit()
        server.shutdown()


if __name__ == "__main__":
    main()
