"""What a rewritten history costs: the turn starting a new sample re-renders once, the turns between stay incremental.

An episode of tool rounds (Qwen3 vocabulary, hermes calls, ~200-token tool results) is built turn by turn through the
provider's own prompt step (:func:`strands_tito.providers.episode.next_prompt`), then timed at each context size:

- ``append``: a turn that extends the sample (the new tool result only), as every turn between rewrites;
- ``check``: of that, comparing the messages Strands passed with the sample's held copy (what detects a rewrite);
- ``continuation``: the same turn's ``PromptEncoder.continuation`` alone (the whole per-turn step before rewrites were
  detected by content);
- ``rewrite``: a turn after a sliding window dropped the oldest round: the whole conversation rendered as the new
  sample's prompt (once per rewrite).

Run: ``.venv/bin/python benchmarks/rewrite_cost.py`` (a few seconds; process CPU, medians of ``REPEATS``).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from _machine import describe

from strands_tito.providers.episode import EpisodeState, next_prompt
from strands_tito.providers.prompt import PromptEncoder
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

REPEATS = 15
SPEC: Any = {"name": "step", "description": "Take a step.", "inputSchema": {"json": {"type": "object"}}}
RESULT = "The step returned these details: " + "alpha beta gamma delta " * 45


def episode(encoder: PromptEncoder, tokens: int) -> tuple[EpisodeState, list[Any]]:
    """A sample of tool rounds grown to about ``tokens`` tokens, and the messages Strands holds at its end."""
    state = EpisodeState(0)
    messages: list[Any] = [{"role": "user", "content": [{"text": "Do the task."}]}]
    end = encoder.encode("<|im_end|>")
    rounds = 0
    while True:
        prompt = next_prompt(state, encoder, {}, messages, [SPEC], "S", [])
        call = f"<tool_call>\n{json.dumps({'name': 'step', 'arguments': {'n': rounds}})}\n</tool_call>"
        state.trajectory.append_turn(prompt, [*encoder.encode(call), *end], finish_reason="stop")
        state.hold(messages)
        state.last_output_text = call
        use = {"toolUseId": f"c{rounds}", "name": "step", "input": {"n": rounds}}
        messages.append({"role": "assistant", "content": [{"text": call}, {"toolUse": use}]})
        result = {"toolUseId": f"c{rounds}", "status": "success", "content": [{"text": f"{rounds}: {RESULT}"}]}
        messages.append({"role": "user", "content": [{"toolResult": result}]})
        rounds += 1
        if len(state.trajectory) >= tokens:
            return state, messages


def cpu_ms(work: Callable[[], object]) -> float:
    samples = []
    for _ in range(REPEATS):
        start = time.process_time()
        work()
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def measure(encoder: PromptEncoder, tokens: int) -> str:
    """One table row: the timings at a context of about ``tokens`` tokens."""
    state, messages = episode(encoder, tokens)
    # Each timed call leaves the state unchanged: an extending turn records nothing here, and the rewrite runs on a
    # copy whose closed sample is discarded.
    append = cpu_ms(lambda: next_prompt(state, encoder, {}, messages, [SPEC], "S", []))
    check = cpu_ms(lambda: state.holds(messages))
    cursor = state.cursor
    continuation = cpu_ms(
        lambda: encoder.continuation(messages[cursor:], messages[cursor - 1], state.trajectory.token_ids, images=[])
    )
    trimmed = [messages[0], *messages[3:]]  # the oldest round dropped, as a sliding window does

    def rewrite() -> None:
        copy = EpisodeState(0)
        copy.trajectory, copy.cursor, copy.held = state.trajectory, state.cursor, state.held
        copy.last_output_text = state.last_output_text
        next_prompt(copy, encoder, {}, trimmed, [SPEC], "S", [])

    rewritten = cpu_ms(rewrite)
    return (
        f"| {len(state.trajectory):,} | {len(messages)} | {append:.2f} | {check:.3f} | {continuation:.2f} "
        f"| {rewritten:.1f} |"
    )


def main() -> None:
    encoder = PromptEncoder(build_qwen3_tokenizer())
    print(f"Machine: {describe()}\n")
    print("| context tokens | messages | append turn (ms) | check (ms) | continuation alone (ms) | rewrite turn (ms) |")
    print("|---|---|---|---|---|---|")
    for tokens in (2_000, 8_000, 32_000, 64_000):
        print(measure(encoder, tokens))


if __name__ == "__main__":
    main()
