"""SGLangClient against real HTTP: retries, backoff, Retry-After, deadlines, probes, slime helpers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from strands_tito import (
    SGLangClient,
    SGLangConnectionError,
    SGLangContextLengthError,
    SGLangHTTPError,
    SGLangThrottledError,
    get_client,
    get_client_from_slime_args,
)
from strands_tito.providers.client import SGLangCancelledError, _CancelWatch, classify_http_error, until_cancelled
from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script

from .conftest import fast_client

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_retry_after_is_honoured(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(429, retry_after=0.4), Reply(text="ok")]))
    client = fast_client(engine)
    start = time.monotonic()
    reply = await client.generate(PROMPT, sampling_params={"max_new_tokens": 8})
    assert time.monotonic() - start >= 0.4
    assert reply["meta_info"]["finish_reason"]["type"] == "stop"


@pytest.mark.parametrize("status", [408, 502, 504])
async def test_transient_statuses_are_retried(start_engine, status: int) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(status), Reply(text="ok")]))
    await fast_client(engine).generate(PROMPT)
    assert [r.status for r in engine.records] == [status, 200]


async def test_deadline_bounds_all_retries(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=50, retry_after=0.3)]))
    client = fast_client(engine, max_retries=50, deadline=1.0)
    start = time.monotonic()
    with pytest.raises(SGLangThrottledError):
        await client.generate(PROMPT)
    assert time.monotonic() - start < 1.5
    assert 2 <= len(engine.records) <= 5


async def test_context_length_400_is_typed_and_not_retried(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok")]), context_length=8)
    prompt = PROMPT * 2  # longer than the context
    with pytest.raises(SGLangContextLengthError, match="context length"):
        await fast_client(engine).generate(prompt)
    assert len(engine.records) == 1


async def test_down_server_is_retried_then_reached() -> None:
    port = free_port()
    client = SGLangClient(f"http://127.0.0.1:{port}", max_retries=20, backoff_base=0.05, backoff_max=0.1)
    from strands_tito.testing.tokenizers import load_tiny_tokenizer

    engine = LocalEngine(load_tiny_tokenizer(), scripts=[Script(turns=[Reply(text="ok")])], port=port)
    # The server comes up only after the first attempts have failed to connect.
    timer = threading.Timer(0.3, engine.start)
    timer.start()
    try:
        reply = await client.generate([1, 2, 3])
        assert reply["output_ids"]
    finally:
        timer.join()
        engine.stop()
        await client.aclose()


async def test_down_server_gives_a_connection_error() -> None:
    client = SGLangClient(f"http://127.0.0.1:{free_port()}", max_retries=1, backoff_base=0.01)
    with pytest.raises(SGLangConnectionError):
        await client.generate([1, 2, 3])
    assert await client.health() is False


async def test_slow_server_times_out(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=3.0)]))
    with pytest.raises(SGLangConnectionError, match="Timeout"):
        await fast_client(engine, timeout=0.3, max_retries=0).generate(PROMPT)


async def test_cancel_signal_drops_the_request(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=3.0)]))
    signal = threading.Event()
    asyncio.get_running_loop().call_later(0.2, signal.set)
    with pytest.raises(SGLangCancelledError):
        await fast_client(engine).generate(PROMPT, cancel_signal=signal)
    for _ in range(40):
        if engine.records:
            break
        await asyncio.sleep(0.05)
    assert engine.records[0].disconnected


async def test_cancel_signal_watch_serves_every_request_without_polling() -> None:
    """One thread per signal: it cancels every request in flight under it at once, and ends when idle."""
    signal = threading.Event()
    started = time.process_time()

    async def slow() -> str:
        await asyncio.sleep(0.4)
        return "done"

    assert await until_cancelled(slow(), signal) == "done"  # a request that ends normally
    assert time.process_time() - started < 0.1  # no per-check loop wake-ups while it ran
    asyncio.get_running_loop().call_later(0.1, signal.set)
    results = await asyncio.gather(
        *(until_cancelled(asyncio.sleep(5), signal) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, SGLangCancelledError) for r in results)
    with pytest.raises(SGLangCancelledError):  # a signal left set cancels the next request too
        await until_cancelled(asyncio.sleep(5), signal)
    quiet = threading.Event()
    watch = _CancelWatch.register(quiet, asyncio.ensure_future(asyncio.sleep(0)), lambda: None, idle=0.05)
    watch.discard(next(iter(watch.pending)))
    for _ in range(40):
        if id(quiet) not in _CancelWatch.watches:
            break
        await asyncio.sleep(0.05)
    assert id(quiet) not in _CancelWatch.watches


async def test_cancel_signal_cancels_only_the_request_in_the_callers_task() -> None:
    """The request runs in the caller's task: a cancel is taken back once raised, and a late signal is harmless."""
    signal = threading.Event()
    asyncio.get_running_loop().call_later(0.05, signal.set)
    with pytest.raises(SGLangCancelledError):
        await until_cancelled(asyncio.sleep(5), signal)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0.01)  # the task goes on normally
    later = threading.Event()
    assert await until_cancelled(asyncio.sleep(0, "ok"), later) == "ok"
    later.set()  # after the request ended: nothing left to cancel
    await asyncio.sleep(0.1)
    assert task.cancelling() == 0


async def test_probes_cache_success_only(start_engine) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(context_length=4096)
    client = SGLangClient(engine.base_url + "/wrong-prefix", max_retries=0)
    with pytest.raises(SGLangHTTPError):
        await client.max_model_len()
    client.base_url = engine.base_url  # the failure was not remembered
    await client.aclose()
    assert await client.max_model_len() == 4096
    assert await client.is_multimodal() is False
    assert await client.health() is True
    engine.stop()
    assert await client.max_model_len() == 4096  # cached after success


def test_error_classification() -> None:
    assert isinstance(
        classify_http_error(
            400, '{"error":{"message":"The input (9 tokens) is longer than the model\'s context length (5 tokens)."}}'
        ),
        SGLangContextLengthError,
    )
    assert isinstance(classify_http_error(503, "{}"), SGLangThrottledError)
    assert type(classify_http_error(400, '{"error": "unknown field `x`"}')) is SGLangHTTPError


def test_slime_helpers_share_one_client() -> None:
    args = SimpleNamespace(
        sglang_router_ip="10.0.0.1",
        sglang_router_port=3000,
        sglang_server_concurrency=16,
        rollout_num_gpus=8,
        rollout_num_gpus_per_engine=2,
    )
    client = get_client_from_slime_args(args)
    assert client.base_url == "http://10.0.0.1:3000"
    assert client.max_connections == 16 * 4
    assert get_client_from_slime_args(args) is client
    assert get_client("http://10.0.0.1:3000", max_connections=64) is client
