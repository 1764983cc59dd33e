"""Shared fixtures: the real Qwen3 vocabulary (built offline, cached), local engines on 127.0.0.1, models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from transformers import PreTrainedTokenizerBase

from strands_tito.capture.span_ids import SystemRandomIdGenerator
from strands_tito.collector import Collector, CollectorConfig
from strands_tito.settings import reset_settings
from strands_tito.testing.engine import LocalEngine, Script
from strands_tito.testing.tokenizers import build_qwen3_tokenizer

from .helpers.otlp import OTLPSink


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    """Each test reads the ``STRANDS_TITO_*`` settings anew at their first use (after its own ``monkeypatch.setenv``);
    a test that sets a variable after something already read them calls ``reset_settings()`` itself."""
    reset_settings()
    yield
    reset_settings()


@pytest.fixture(scope="session")
def qwen3() -> PreTrainedTokenizerBase:
    """The real Qwen3 vocabulary with the project's Qwen3-style chat template (cached between runs)."""
    return build_qwen3_tokenizer()


@pytest.fixture(scope="session")
def tokenizer_dir(qwen3: PreTrainedTokenizerBase, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model folder holding the offline Qwen3 tokenizer: what ``AutoTokenizer.from_pretrained`` reads when an
    engine reports it as its model path (as a real SGLang server started with a local ``--model-path`` does)."""
    path = tmp_path_factory.mktemp("Qwen3-offline")
    qwen3.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def real_template() -> Callable[[str], str]:
    """Reads a real Hugging Face chat template by file name (fetched once from the llama-cpp-python sdist)."""
    from strands_tito.testing.chat_templates import real_chat_template

    return real_chat_template


@pytest.fixture
def start_engine(qwen3: PreTrainedTokenizerBase) -> Iterator[Callable[..., LocalEngine]]:
    """Start local engines on 127.0.0.1 (random ports); all are stopped at the end of the test."""
    engines: list[LocalEngine] = []

    def start(*scripts: Script, **kwargs: Any) -> LocalEngine:
        kwargs.setdefault("default", None)
        engine = LocalEngine(kwargs.pop("tokenizer", qwen3), scripts=list(scripts), **kwargs)
        engine.start()
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.stop()


# -- span capture (shared by the capture tests) ----------------------------------------------------------------------


class _Dispatch(SpanProcessor):
    """The one global provider's processor; each test plugs its own processors in and out."""

    def __init__(self) -> None:
        self.targets: list[SpanProcessor] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        for target in list(self.targets):
            target.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in list(self.targets):
            target.on_end(span)


_DISPATCH = _Dispatch()


@pytest.fixture(scope="session")
def provider() -> TracerProvider:
    """A real SDK provider, installed globally once (OpenTelemetry allows that only once per process). Its ids come
    from strands-tito's generator, as a user who seeds ``random`` would set it up: with the SDK's default, capture's
    thread ending a released agent's trajectory draws from the global state while hypothesis checks it."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        current = TracerProvider(id_generator=SystemRandomIdGenerator())
        trace.set_tracer_provider(current)
    current.add_span_processor(_DISPATCH)
    return current


@pytest.fixture
def plug(provider: TracerProvider) -> Iterator[Callable[[SpanProcessor], None]]:
    plugged: list[SpanProcessor] = []

    def add(processor: SpanProcessor) -> None:
        plugged.append(processor)
        _DISPATCH.targets.append(processor)

    yield add
    for processor in plugged:
        _DISPATCH.targets.remove(processor)
        processor.shutdown()


@pytest.fixture
def memory(plug: Callable[[SpanProcessor], None]) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    plug(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
async def collector(tmp_path: Path) -> AsyncIterator[Collector]:
    """An in-process collector on free ports writing JSONL and Parquet under ``tmp_path``."""
    config = CollectorConfig(
        store=tmp_path / "store.db",
        outputs=[f"jsonl:{tmp_path / 'out.jsonl'}", f"parquet:{tmp_path / 'parquet'}"],
        parquet_linger=0.3,  # parts gather for a moment only: these tests read them at once
        http_port=0,
        grpc_port=0,
        progress_interval=0,
        idle_timeout=600,
    )
    c = Collector(config)
    await c.start()
    background = asyncio.create_task(c.run_background())
    yield c
    background.cancel()
    await c.stop()


@pytest.fixture
def otlp_sinks() -> Iterator[Callable[[], OTLPSink]]:
    """Start OTLP sinks on demand (``otlp_sinks()``); all are closed after the test."""
    started: list[OTLPSink] = []

    def start() -> OTLPSink:
        started.append(OTLPSink())
        return started[-1]

    yield start
    for sink in started:
        sink.close()
