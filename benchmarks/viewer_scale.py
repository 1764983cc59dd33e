"""How the trajectory viewer copes with many long trajectories (``strands-tito view`` and the written page).

Writes N synthetic records of L tokens each (the real Qwen3 vocabulary, three turns, logprobs on every output token)
to a JSONL file, then measures: building the served index (the one pass over the file ``strands-tito view`` makes at
start, with its peak memory), answering one trajectory (``GET /t/N``: the line read again, each token decoded), and,
in headless Chromium (scripts/browser.sh installs it), loading the served page and rendering one trajectory of L
tokens. Also the size a written page (``inspect --html``) would take per trajectory.

    python benchmarks/viewer_scale.py [--trajectories 1000] [--tokens 32768]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import tempfile
import threading
import time
from pathlib import Path

from _machine import describe

from strands_tito.html_view import TokenTexts, TrajectoryIndex, serve, trajectory_payload
from strands_tito.testing.tokenizers import build_qwen3_tokenizer
from strands_tito.viewer import Decoder


def synthetic_record(number: int, tokens: int, rng: random.Random) -> str:
    third = tokens // 3
    ids = [rng.randrange(150_000) for _ in range(tokens)]
    mask = [0] * third + [1] * third + [0] * (tokens - 3 * third) + [1] * third
    mask = (mask + [1] * tokens)[:tokens]
    logprobs = [round(-rng.random() * 3, 4) if m else None for m in mask]
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
    args = parser.parse_args()
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
        started = time.perf_counter()
        index = TrajectoryIndex(data)
        index_s = time.perf_counter() - started
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

        browser = measure_browser(data, decode, args.trajectories // 2)
        print(describe())
        print(
            f"\n{args.trajectories} trajectories x {args.tokens:,} tokens: JSONL {size_mb:,.0f} MB ({written:.1f} s)\n"
        )
        print("| step | time | note |")
        print("|---|---|---|")
        rss = f"peak RSS {rss_before:,.0f} -> {rss_after:,.0f} MiB"
        print(f"| served index (one pass over the file) | {index_s:.1f} s | {rss} |")
        payload_mb = f"{len(body) / 2**20:.1f} MB JSON; token texts cached per id"
        times = f"{first_s * 1000:.0f} / {second_s * 1000:.0f} ms"
        print(f"| one trajectory's payload, first / next | {times} | {payload_mb} |")
        for step, value in browser.items():
            print(f"| {step} | {value} | headless Chromium |")
        print(f"| written page (inspect --html) | - | about {len(body) / 2**20:.1f} MB per trajectory embedded |")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
