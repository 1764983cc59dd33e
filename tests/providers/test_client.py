"""The clients against real HTTP, each test for both backends' clients where the transport is shared: retries,
backoff, Retry-After, deadlines, cancellation, probes, and messages that name the backend in use; slime helpers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from strands_tito import (
    SGLangCancelledError,
    SGLangClient,
    SGLangConnectionError,
    SGLangContextLengthError,
    SGLangDecodingError,
    SGLangHTTPError,
    SGLangThrottledError,
    TokenClient,
    VLLMClient,
    get_client,
    get_client_from_slime_args,
)
from strands_tito.providers import client as client_module
from strands_tito.providers.client import classify_http_error, until_cancelled
from strands_tito.testing.engine import Fault, LocalEngine, Reply, Script

from ..helpers.agents import fast_client
from ..helpers.collector import free_port

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


#: What each backend's messages must call it.
NAMES: dict[type[TokenClient], str] = {SGLangClient: "SGLang", VLLMClient: "vLLM"}


@pytest.fixture(params=[SGLangClient, VLLMClient], ids=["sglang", "vllm"])
def backend(request: pytest.FixtureRequest) -> type[TokenClient]:
    """Each backend's client: the transport's behaviour is the same for both, and its messages name the one used."""
    return request.param  # type: ignore[no-any-return]


async def generate(client: TokenClient, prompt: list[int], **kwargs: Any) -> dict[str, Any]:
    """One generation through the backend's own route (SGLang's /generate, vLLM's /inference/v1/generate)."""
    if isinstance(client, SGLangClient):
        return await client.generate(prompt, sampling_params={"max_new_tokens": 8}, **kwargs)
    assert isinstance(client, VLLMClient)
    return await client.generate(prompt, {"max_tokens": 8}, **kwargs)


def route(client: TokenClient) -> str:
    return "/generate" if isinstance(client, SGLangClient) else "/inference/v1/generate"


async def test_retry_after_is_honoured(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(429, retry_after=0.4), Reply(text="ok")]))
    client = fast_client(engine, client_type=backend)
    start = time.monotonic()
    await generate(client, PROMPT)
    assert time.monotonic() - start >= 0.4
    assert [r.status for r in engine.records] == [429, 200]


@pytest.mark.parametrize("status", [408, 502, 504])
async def test_transient_statuses_are_retried(start_engine, backend, status: int) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(status), Reply(text="ok")]))
    client = fast_client(engine, client_type=backend)
    await generate(client, PROMPT)
    assert [(r.path, r.status) for r in engine.records] == [(route(client), status), (route(client), 200)]


async def test_retries_log_the_backend_in_use(start_engine, backend, caplog) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=2), Reply(text="ok")]))
    with caplog.at_level(logging.WARNING, logger="strands_tito.providers.client"):
        await generate(fast_client(engine, client_type=backend), PROMPT)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2
    assert all(m.endswith(f"| retrying {NAMES[backend]} request") for m in retries)
    # Each names the backend and its route where the error is quoted, never the other backend.
    other = "vLLM" if backend is SGLangClient else "SGLang"
    assert all(f"error=<{NAMES[backend]} (POST /" in m and other not in m for m in retries)


async def test_deadline_bounds_all_retries(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.http(503, count=50, retry_after=0.3)]))
    client = fast_client(engine, client_type=backend, max_retries=50, deadline=1.0)
    start = time.monotonic()
    with pytest.raises(SGLangThrottledError, match=f"^{NAMES[backend]} "):
        await generate(client, PROMPT)
    assert time.monotonic() - start < 1.5
    assert 2 <= len(engine.records) <= 5


async def test_context_length_400_is_typed_and_not_retried(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="ok")]), context_length=8)
    prompt = PROMPT * 2  # longer than the context
    with pytest.raises(SGLangContextLengthError, match=f"^{NAMES[backend]} .*context") as caught:
        await generate(fast_client(engine, client_type=backend), prompt)
    assert len(engine.records) == 1
    assert caught.value.status == 400


async def test_down_server_is_retried_then_reached(backend) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    client = backend(f"http://127.0.0.1:{port}", max_retries=20, backoff_base=0.05, backoff_max=0.1)
    from strands_tito.testing.tokenizers import load_tiny_tokenizer

    engine = LocalEngine(load_tiny_tokenizer(), scripts=[Script(turns=[Reply(text="ok")])], port=port)
    # The server comes up only after the first attempts have failed to connect.
    timer = threading.Timer(0.3, engine.start)
    timer.start()
    try:
        reply = await generate(client, [1, 2, 3])
        assert reply
        assert [r.path for r in engine.records] == [route(client)]
    finally:
        timer.join()
        engine.stop()
        await client.aclose()


async def test_down_server_gives_a_connection_error_naming_the_backend(backend) -> None:  # type: ignore[no-untyped-def]
    client = backend(f"http://127.0.0.1:{free_port()}", max_retries=1, backoff_base=0.01)
    with pytest.raises(SGLangConnectionError, match=f"cannot connect to {NAMES[backend]} "):
        await generate(client, [1, 2, 3])
    assert await client.health() is False


async def test_slow_server_times_out(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=3.0)]))
    client = fast_client(engine, client_type=backend, timeout=0.3, max_retries=0)
    with pytest.raises(SGLangConnectionError, match=f"^{NAMES[backend]} \\(POST .* failed: .*Timeout"):
        await generate(client, PROMPT)


async def test_non_json_reply_names_the_backend(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Fault.malformed("non_json")]))
    with pytest.raises(SGLangDecodingError, match=f"^{NAMES[backend]} \\(POST .*not JSON"):
        await generate(fast_client(engine, client_type=backend, max_retries=0), PROMPT)


async def test_cancel_signal_drops_the_request(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(Script(turns=[Reply(text="late", delay=3.0)]))
    signal = threading.Event()
    asyncio.get_running_loop().call_later(0.2, signal.set)
    with pytest.raises(SGLangCancelledError, match=f"^{NAMES[backend]} request"):
        await generate(fast_client(engine, client_type=backend), PROMPT, cancel_signal=signal)
    for _ in range(40):
        if engine.records:
            break
        await asyncio.sleep(0.05)
    assert engine.records[0].disconnected


async def test_cancel_signal_watch_serves_every_request_without_polling(monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.setattr(client_module, "CANCEL_WATCH_IDLE", 0.05)
    before = set(threading.enumerate())
    assert await until_cancelled(asyncio.sleep(0, "ok"), threading.Event()) == "ok"
    [watch] = [t for t in set(threading.enumerate()) - before if t.name == "strands-tito-cancel-watch"]
    watch.join(2.0)  # idle for CANCEL_WATCH_IDLE: it ends by itself
    assert not watch.is_alive()


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


async def test_probes_cache_success_only(start_engine, backend) -> None:  # type: ignore[no-untyped-def]
    engine = start_engine(context_length=4096)
    client = backend(engine.base_url + "/wrong-prefix", max_retries=0)
    with pytest.raises(SGLangHTTPError, match=f"^{NAMES[backend]} \\(GET /v1/models\\) returned HTTP 404"):
        await client.max_model_len()
    client.base_url = engine.base_url  # the failure was not remembered
    await client.aclose()
    assert await client.max_model_len() == 4096
    if isinstance(client, SGLangClient):
        assert await client.is_multimodal() is False
    assert await client.health() is True
    engine.stop()
    assert await client.max_model_len() == 4096  # cached after success


async def test_each_client_speaks_only_its_own_backends_routes() -> None:
    """The shared transport has no generation route; SGLang's /generate is not a vLLM client's, nor the reverse."""
    assert not hasattr(TokenClient, "generate")
    assert not hasattr(VLLMClient, "model_info") and not hasattr(VLLMClient, "reserved_tokens")
    assert not hasattr(SGLangClient, "generate_tokens") and not hasattr(SGLangClient, "complete")


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
