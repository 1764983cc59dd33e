"""The seed examples run unchanged (only the import is strands_tito) against the local engine."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import transformers

from strands_tito.testing.engine import Reply, Script, routed_experts_for

from ..helpers.agents import generate_records
from ..helpers.moe import moe_model_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
XML_CALL = (
    "<tool_call>\n<function=multiply>\n<parameter=a>\n25\n</parameter>\n<parameter=b>\n17\n</parameter>\n"
    "</function>\n</tool_call>"
)
HERMES_CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 25, "b": 17}}\n</tool_call>'


@pytest.mark.parametrize(
    ("example", "call"), [("quickstart_client.py", XML_CALL), ("quickstart_base_url.py", HERMES_CALL)]
)
def test_quickstart_examples(start_engine, qwen3, monkeypatch, capsys, example: str, call: str) -> None:  # type: ignore[no-untyped-def]
    # The examples talk to $SGLANG_URL and load a hub tokenizer; serve both locally (on a free port).
    engine = start_engine(Script(turns=[Reply(text=call), Reply(text="25 * 17 = 425")]))
    monkeypatch.setenv("SGLANG_URL", engine.base_url)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: qwen3)
    runpy.run_path(str(EXAMPLES / example), run_name="__main__")

    out = capsys.readouterr().out
    printed = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in out.splitlines() if ": [" in line}
    tokens = ast.literal_eval(printed["Tokens"])
    records = generate_records(engine)
    assert len(records) == 2
    assert tokens == (records[-1].input_ids or []) + (records[-1].output_ids or [])
    assert "425" in qwen3.decode(records[1].input_ids)  # the real multiply tool ran and the model saw its result
    mask = ast.literal_eval(printed["Loss mask"])
    assert len(mask) == len(tokens) and sum(mask) == sum(len(r.output_ids or []) for r in records)


def test_slime_generate_example(start_engine, qwen3, monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code_call = '<tool_call>\n{"name": "execute_python_code", "arguments": {"code": "print(6 * 7)"}}\n</tool_call>'
    engine = start_engine(
        Script(turns=[Reply(text=code_call), Reply(text="The answer is \\boxed{42}.")]),
        routed_experts=(4, 2, 16),
        model_path=str(moe_model_dir(tmp_path / "moe", (4, 2, 16))),  # the served checkpoint: the routing layout
    )
    monkeypatch.syspath_prepend(str(EXAMPLES))
    module = runpy.run_path(str(EXAMPLES / "slime_generate.py"))
    sys.modules.pop("_slime_stubs", None)
    args = SimpleNamespace(
        partial_rollout=False,
        hf_checkpoint="qwen3",
        sglang_router_ip="127.0.0.1",
        sglang_router_port=engine.port,
        sglang_server_concurrency=8,
        rollout_num_gpus=2,
        rollout_num_gpus_per_engine=1,
        num_layers=4,
        moe_router_topk=2,
    )
    sample_cls = module["Sample"]
    sample = sample_cls(prompt="What is 6 * 7?")
    import asyncio

    result = asyncio.run(module["generate"](args, sample, {"max_new_tokens": 128, "temperature": 1.0}))

    records = generate_records(engine)
    assert result.status == sample_cls.Status.COMPLETED
    assert result.tokens == (records[-1].input_ids or []) + (records[-1].output_ids or [])
    prompt_len = len(result.tokens) - result.response_length
    assert prompt_len == len(records[0].input_ids or [])
    assert len(result.loss_mask) == len(result.rollout_log_probs) == result.response_length
    assert "42" in qwen3.decode(records[1].input_ids)  # the tool really ran
    assert (result.tool_iters, result.tool_calls) == (1, 1)
    # The seed's module-level decode_routed_experts(model.routed_experts, seq_len=..., num_layers=..., top_k=...).
    assert isinstance(result.rollout_routed_experts, np.ndarray)
    assert result.rollout_routed_experts.shape == (len(result.tokens) - 1, 4, 2)
    assert np.array_equal(result.rollout_routed_experts, routed_experts_for(result.tokens, 0, 4, 2, 16))


def test_slime_example_keeps_the_seed_routing_call() -> None:
    """The seed's R3 call stays as the seed documents wrote it (it was once rewritten to avoid a missing feature)."""
    calls = [
        node
        for node in ast.walk(ast.parse((EXAMPLES / "slime_generate.py").read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "decode_routed_experts"
    ]
    assert len(calls) == 1
    assert ast.unparse(calls[0]) == (
        "decode_routed_experts(model.routed_experts, seq_len=len(trajectory.token_ids), num_layers=args.num_layers, "
        "top_k=args.moe_router_topk)"
    )
