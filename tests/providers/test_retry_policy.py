"""The client's one retry policy, end to end: a real Strands agent against the local engine over HTTP.

What RL runs depend on: a rollout survives the failures SGLang answers while the trainer reloads weights (500, a
non-context 400, and, when asked, the abort of the request in flight); what a retry cannot fix fails at once; an
engine that is down fails within seconds with a clear error, and a longer window rides out a restart.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from strands.types.exceptions import ContextWindowOverflowException

from strands_tito import (
    RetryPolicy,
    ServerHTTPError,
    ServerUnreachableError,
    SGLangAbortedError,
    SGLangClient,
    SGLangModel,
)
from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script

from ..helpers.agents import assert_matches_engine, calculator, generate_records, make_agent, make_model
from ..helpers.collector import free_port

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
FAST = {"backoff_base": 0.01, "backoff_max": 0.05}


@pytest.mark.parametrize(
    ("fault", "policy"),
    [
        (Fault.weight_update(500, count=2), {}),
        (Fault.weight_update(400, count=2), {}),
        (Fault.weight_update(count=2), {"retry": RetryPolicy(retry_aborted=True)}),
    ],
    ids=["500", "400", "abort"],
)
async def test_a_rollout_survives_a_weight_reload(start_engine, qwen3, fault: Fault, policy: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    # The reload lands between the tool call and the answer, mid-rollout.
    engine = start_engine(Script(turns=[Reply(text=CALL), fault, Reply(text="42")]))
    model = make_model(engine, qwen3, client_kwargs={**FAST, **policy})
    agent = make_agent(model, [calculator])
    await agent.invoke_async("What is 6 * 7?")
    assert str(agent.messages[-1]["content"][-1]["text"]) == "42"
    sent = [r for r in engine.records if r.path == "/generate"]
    assert len(sent) == 4 and [r.fault is not None for r in sent] == [False, True, True, False]
    # The failed attempts left nothing behind: the trajectory is exactly the two generations that succeeded.
    assert_matches_engine(model.trajectory, generate_records(engine))
    assert sent[1].request["input_ids"] == sent[2].request["input_ids"] == sent[3].request["input_ids"]


async def test_an_abort_is_raised_unless_the_policy_retries_it(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text=CALL), Fault.weight_update(), Reply(text="42")]))
    model = make_model(engine, qwen3, client_kwargs=FAST)
    with pytest.raises(Exception) as raised:  # Strands wraps errors of a later cycle in EventLoopException
        await make_agent(model, [calculator]).invoke_async("What is 6 * 7?")
    assert isinstance(raised.value, SGLangAbortedError) or isinstance(raised.value.__cause__, SGLangAbortedError)
    assert len(model.trajectory.turns) == 1  # the turn before the abort, nothing of the aborted one


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_what_a_retry_cannot_fix_is_not_retried(start_engine, qwen3, status: int) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(status, count=5), Reply(text="never")]))
    model = make_model(engine, qwen3, client_kwargs=FAST)
    with pytest.raises(ServerHTTPError) as raised:
        await make_agent(model).invoke_async("Hi")
    assert raised.value.status == status
    assert len([r for r in engine.records if r.path == "/generate"]) == 1


async def test_a_context_length_400_is_not_retried(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.context_overflow("scheduler", count=5), Reply(text="never")]))
    model = make_model(engine, qwen3, client_kwargs=FAST)
    with pytest.raises(ContextWindowOverflowException):
        await make_agent(model).invoke_async("Hi")
    assert len([r for r in engine.records if r.path == "/generate"]) == 1


async def test_an_engine_that_is_down_fails_within_seconds(qwen3) -> None:  # type: ignore[no-untyped-def]
    # The default policy (no test overrides): a wrong port must not cost minutes of retries.
    model = SGLangModel(client=SGLangClient(f"http://127.0.0.1:{free_port()}"), tokenizer=qwen3)
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError, match="down or not listening"):
        await make_agent(model).invoke_async("Hi")
    assert time.monotonic() - started < 4.0  # the default window is 2 s
    assert model.trajectory.turns == []


async def test_a_longer_unreachable_window_rides_out_an_engine_restart(qwen3) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    client = SGLangClient(f"http://127.0.0.1:{port}", retry=RetryPolicy(unreachable_timeout=30.0, **FAST))
    engine = LocalEngine(qwen3, scripts=[Script(turns=[Reply(text="Back.")])], port=port, default=None)
    timer = threading.Timer(2.5, engine.start)  # longer than the default window
    timer.start()
    try:
        model = make_model(engine, qwen3)
        model.client = client
        await make_agent(model).invoke_async("Hi")
        assert_matches_engine(model.trajectory, generate_records(engine))
    finally:
        timer.join()
        engine.stop()
        await client.aclose()


async def test_an_invalid_sampling_value_is_not_retried(start_engine, qwen3) -> None:  # type: ignore[no-untyped-def]
    # SGLang's sampling-parameter validation answers 400 too; no retry can fix it (an unknown field: test_sglang_model).
    engine = start_engine(Script(turns=[Reply(text="never")]))
    model = make_model(engine, qwen3, sampling_params={"max_new_tokens": 16, "top_p": 2.0}, client_kwargs=FAST)
    with pytest.raises(ServerHTTPError) as raised:
        await make_agent(model).invoke_async("Hi")
    assert raised.value.status == 400
    assert len([r for r in engine.records if r.path == "/generate"]) == 1
