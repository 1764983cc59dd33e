"""One REINFORCE step on captured records, on CPU with torch, as a trainer takes it.

    python examples/reinforce_step.py RECORDS.jsonl MODEL_DIR OUT_DIR [--lr 1e-2]

Run it with a Python that has torch and transformers (a trainer's, or vLLM's). Each record is one rollout of a
group; its ``reward`` (the last one recorded) minus the group's mean is its advantage. The loss reads only the
generated tokens (``loss_mask`` 1) and weighs each by the truncated importance ratio of the policy being trained over
the rollout's recorded ``logprobs`` (1 on the first step up to numeric noise, as ``strands-tito verify`` shows):

    loss = -sum_i A_i * sum_t min(exp(lp_t - rollout_lp_t), cap).detach() * lp_t / generated tokens

One Adam step, then the new weights (and the tokenizer) are saved to OUT_DIR, ready to be served again.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def main() -> None:
    """Parse the arguments, take the step, print what changed."""
    import torch
    from transformers import AutoModelForCausalLM

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", type=Path)
    p.add_argument("model", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--cap", type=float, default=2.0)
    a = p.parse_args()
    records: list[dict[str, Any]] = [json.loads(line) for line in a.records.read_text().splitlines() if line.strip()]
    rewards = [float(r.get("reward") or 0.0) for r in records]
    baseline = sum(rewards) / len(rewards)
    model: Any = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    generated = sum(sum(r["loss_mask"][1:]) for r in records)
    loss = torch.zeros(())
    for record, reward in zip(records, rewards, strict=True):
        ids = torch.tensor([record["token_ids"]])
        mask = torch.tensor(record["loss_mask"][1:], dtype=torch.bool)
        rollout = torch.tensor([0.0 if v is None else v for v in record["logprobs"][1:]])
        logits = model(ids).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:].unsqueeze(1)).squeeze(1)
        ratio = torch.clamp(torch.exp(logprobs - rollout), max=a.cap).detach()
        loss = loss - (reward - baseline) * (ratio * logprobs)[mask].sum() / generated
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    moved = max((value.detach() - before[name]).abs().max().item() for name, value in model.named_parameters())
    a.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(a.out)
    tokenizer_files = ("tokenizer", "special_tokens", "vocab", "merges", "chat_template")
    for name in a.model.iterdir():  # the tokenizer and chat template, as they were
        if name.is_file() and name.name.startswith(tokenizer_files):
            shutil.copy(name, a.out / name.name)
    print(json.dumps({"loss": loss.item(), "generated_tokens": generated, "max_weight_change": moved}))


if __name__ == "__main__":
    main()
