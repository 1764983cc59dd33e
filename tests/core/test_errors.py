"""The error hierarchy drawn in ``strands_tito.errors``: one root, backend-neutral generation errors."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from strands.types.exceptions import EventLoopException

import strands_tito
from strands_tito import errors
from strands_tito.errors import GenerationError, ServerHTTPError, StrandsTitoError


def public_exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in the product (the local engine, a test/dev server, keeps its own)."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(strands_tito.__path__, "strands_tito."):
        if info.name.startswith("strands_tito.testing.engine"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra that is not installed
            continue
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_public_exception_is_a_strands_tito_error() -> None:
    found = public_exceptions()
    assert len(found) >= 30
    assert not [name for name, cls in found.items() if not issubclass(cls, StrandsTitoError)]


def test_every_error_of_the_package_namespace_is_a_strands_tito_error() -> None:
    exported = [getattr(strands_tito, name) for name in strands_tito.__all__ if name.endswith("Error")]
    assert exported and all(issubclass(cls, StrandsTitoError) for cls in exported)


def test_the_hierarchy_is_drawn_in_the_module_docs() -> None:
    doc = errors.__doc__ or ""
    for cls in public_exceptions().values():
        assert cls.__name__ in doc, cls


def test_vllm_errors_derive_from_backend_neutral_classes_only() -> None:
    from strands_tito.providers import vllm

    for cls in (vllm.VLLMResponseError, vllm.VLLMAbortedError, vllm.VLLMEndpointError):
        assert not [base.__name__ for base in cls.__mro__ if base.__name__.startswith("SGLang")], cls
        assert issubclass(cls, GenerationError)
    assert issubclass(vllm.VLLMEndpointError, ServerHTTPError)
    assert not issubclass(vllm.VLLMResponseError, strands_tito.SGLangResponseError)
    assert vllm.VLLMClient.__mro__[1] is strands_tito.TokenClient


def test_sglang_names_are_the_neutral_classes_by_design() -> None:
    """One ``except SGLangClientError`` (the 0.6 name) still catches every generation error of either backend."""
    assert strands_tito.SGLangClient.__mro__[1] is strands_tito.TokenClient
    pairs = {
        "SGLangClientError": "GenerationError",
        "SGLangHTTPError": "ServerHTTPError",
        "SGLangContextLengthError": "ContextLengthError",
        "SGLangThrottledError": "ThrottledError",
        "SGLangConnectionError": "ServerConnectionError",
        "SGLangDecodingError": "ReplyDecodingError",
        "SGLangCancelledError": "RequestCancelledError",
    }
    for sglang_name, neutral in pairs.items():
        assert getattr(strands_tito, sglang_name) is getattr(errors, neutral)
    assert issubclass(strands_tito.VLLMAbortedError, strands_tito.SGLangClientError)


@pytest.mark.parametrize("name", ["LoopLimitReachedError", "MaxToolCallsReachedError", "MaxMessagesReachedError"])
def test_limit_errors_stay_strands_event_loop_exceptions(name: str) -> None:
    cls = getattr(strands_tito, name)
    assert issubclass(cls, EventLoopException) and issubclass(cls, StrandsTitoError)
    error = cls("stop", count=3, limit=3)
    assert str(error) == "stop" and error.count == 3


@pytest.mark.parametrize(
    ("name", "builtin"),
    [("PromptError", ValueError), ("TrajectoryError", ValueError), ("HistoryRewrittenError", GenerationError)],
)
def test_errors_keep_their_old_bases(name: str, builtin: type[BaseException]) -> None:
    assert issubclass(getattr(strands_tito, name), builtin)
