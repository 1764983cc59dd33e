"""The one module per upstream library (``strands_tito.upstream``): what each relies on is still where it was.

An upgrade of Strands, the OpenTelemetry SDK or transformers fails here first: either its version leaves the range
the module was checked against (re-read the upstream source, then widen ``CHECKED``), or something the module touches
moved (each ``verify()`` and the contract tests below). A move at run time is a clear error naming the library, its
version and what moved.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from strands import Agent
from strands.models import Model
from strands.models.openai import OpenAIModel
from strands.telemetry import tracer as strands_tracer
from transformers.utils import chat_template_utils

from strands_tito.capture.openai import instrument_openai_model, is_openai_model_instrumented
from strands_tito.capture.switch_on import ENV_SPAN_CONTENT, SEMCONV_OPT_IN, keep_content_off_spans
from strands_tito.upstream import (
    UpstreamChangedError,
    installed_version,
    opentelemetry_sdk,
    strands_sdk,
    transformers_lib,
)

MODULES = [strands_sdk, opentelemetry_sdk, transformers_lib]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.DISTRIBUTION)
def test_the_installed_version_is_one_the_module_was_checked_against(module: ModuleType) -> None:
    installed = installed_version(module.DISTRIBUTION)
    assert Version(installed) in SpecifierSet(module.CHECKED), (
        f"{module.DISTRIBUTION} {installed} is outside {module.CHECKED}: re-read what {module.__name__} touches in "
        "its source, then widen CHECKED"
    )


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.DISTRIBUTION)
def test_everything_each_module_touches_is_still_there(module: ModuleType) -> None:
    module.verify()


def test_the_error_names_the_library_its_version_and_the_checked_range() -> None:
    error = UpstreamChangedError("strands-agents", ">=1.62.0,<1.63", "Tracer.__init__ moved")
    text = str(error)
    assert f"strands-agents {installed_version('strands-agents')}: Tracer.__init__ moved" in text
    assert ">=1.62.0,<1.63" in text
    assert error.distribution == "strands-agents"


# -- Strands ----------------------------------------------------------------------------------------------------------


class StateCounter(Model):
    """A model that counts its calls in the ``model_state`` Strands hands it (what every strands-tito model does)."""

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> dict[str, Any]:
        """No configuration."""
        return {}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not used."""
        raise NotImplementedError
        yield

    async def stream(self, *args: Any, model_state: dict[str, Any] | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        """One text reply; counts the call in ``model_state``."""
        assert model_state is not None
        model_state["calls"] = model_state.get("calls", 0) + 1
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": "ok"}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}


def test_model_state_is_the_dict_strands_hands_the_model() -> None:
    agent = Agent(model=StateCounter(), callback_handler=None)
    agent("one")
    agent("two")
    state = strands_sdk.model_state(agent)
    assert state is not None and state["calls"] == 2
    assert strands_sdk.model_state(object()) is None  # not an agent: nothing to read


def test_an_agent_without_model_state_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Agent(model=StateCounter(), callback_handler=None)
    monkeypatch.delattr(agent, "_model_state")
    with pytest.raises(UpstreamChangedError, match=r"strands-agents \S+: Agent\._model_state .*checked against"):
        strands_sdk.model_state(agent)


def test_the_hook_runs_before_strands_looks_up_the_tracer_provider() -> None:
    # In a fresh interpreter: the patch of Tracer.__init__ stays for the life of the process.
    script = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from strands.telemetry.tracer import get_tracer\n"
        "from strands_tito.upstream import strands_sdk\n"
        "installed = TracerProvider()\n"
        "assert not strands_sdk.tracer_created()\n"
        "strands_sdk.call_before_tracer_created(lambda: trace.set_tracer_provider(installed))\n"
        "tracer = get_tracer()\n"
        "assert tracer.tracer_provider is installed, tracer.tracer_provider\n"
        "assert strands_sdk.tracer_created()\n"
        "late = []\n"
        "strands_sdk.call_before_tracer_created(lambda: late.append(1))\n"
        "assert late == [1]  # the tracer exists already: called at once\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_moved_tracer_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delattr(strands_tracer, "_tracer_instance")
    with pytest.raises(UpstreamChangedError, match=r"strands-agents .*_tracer_instance"):
        strands_sdk.tracer_created()
    with pytest.raises(UpstreamChangedError):
        strands_sdk.verify()
    # Switching capture on only warns: whether the tracer exists decides a warning, nothing else.
    monkeypatch.delenv(SEMCONV_OPT_IN, raising=False)
    monkeypatch.delenv(ENV_SPAN_CONTENT, raising=False)
    assert keep_content_off_spans()
    assert "_tracer_instance" in caplog.text


def test_a_moved_openai_method_is_a_clear_error_and_capture_leaves_the_class_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    was_instrumented = is_openai_model_instrumented()
    strands_sdk.unwrap_openai_model()
    stream = OpenAIModel.__dict__["stream"]
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.delattr(OpenAIModel, "_get_client")
            with pytest.raises(UpstreamChangedError, match=r"strands-agents .*OpenAIModel defines no _get_client"):
                strands_sdk.verify()
            assert not instrument_openai_model()
            assert "OpenAIModel defines no _get_client" in caplog.text
            assert OpenAIModel.__dict__["stream"] is stream and not is_openai_model_instrumented()
    finally:
        if was_instrumented:
            instrument_openai_model()


# -- OpenTelemetry SDK ------------------------------------------------------------------------------------------------


def test_span_limits_are_read_from_the_provider_and_its_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = SpanLimits(max_span_attributes=4321)
    provider = TracerProvider(sampler=ALWAYS_ON, span_limits=limits, shutdown_on_exit=False)
    span = provider.get_tracer(__name__).start_span("s")
    assert opentelemetry_sdk.limits_of_provider(provider) is limits
    assert opentelemetry_sdk.limits_of_span(span) is limits
    assert opentelemetry_sdk.limits_of_span(object()) is None  # not an SDK span: no limits to check
    monkeypatch.setattr(span, "_limits", None)
    with pytest.raises(UpstreamChangedError, match=r"opentelemetry-sdk \S+: Span\._limits"):
        opentelemetry_sdk.limits_of_span(span)
    monkeypatch.setattr(provider, "_span_limits", None)
    with pytest.raises(UpstreamChangedError, match=r"opentelemetry-sdk \S+: TracerProvider\._span_limits"):
        opentelemetry_sdk.limits_of_provider(provider)
    span.end()
    provider.shutdown()


# -- transformers -----------------------------------------------------------------------------------------------------


def test_a_moved_chat_template_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert transformers_lib.compiled_chat_template("{{ 1 + 1 }}").render() == "2"
    monkeypatch.delattr(chat_template_utils, "_compile_jinja_template")
    with pytest.raises(UpstreamChangedError, match=r"transformers \S+: .*_compile_jinja_template"):
        transformers_lib.compiled_chat_template("{{ 1 + 1 }}")
