"""The agent side's settings: every ``STRANDS_TITO_*`` environment variable, read in one place, once.

:class:`Settings` is a frozen dataclass; each field names its variable, default and meaning (``docs/settings.md`` is
checked against :func:`markdown_table`). The environment is read when capture is switched on
(:func:`reload_settings`: interpreter start, ``opentelemetry-instrument``, or ``enable_from_env()`` from code) or, in a
process where nothing switched it on, at first use (:func:`get_settings`); a model turn reads the object, never the
environment. Setting a variable in code after that has no effect until :func:`reload_settings`; tests call
:func:`reset_settings` so that the next use reads the environment they set up.

Deprecated variables (folded into another setting) still work for one release, with a one-line warning naming the
replacement (``docs/migration.md``).

Light on purpose: the standard library and two core modules only (the interpreter start-up hook imports it). The
collector's settings are its own (:class:`strands_tito.collector.CollectorConfig`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal

from strands_tito.errors import StrandsTitoError
from strands_tito.span_images import DEFAULT_MAX_IMAGE_BYTES

__all__ = [
    "OFF_VALUES",
    "ON_VALUES",
    "CaptureConfigError",
    "Settings",
    "Variable",
    "capture_off",
    "get_settings",
    "markdown_table",
    "reload_settings",
    "reset_settings",
    "variable",
]

logger = logging.getLogger(__name__)

ON_VALUES: Final = ("1", "true", "on", "yes")
OFF_VALUES: Final = ("0", "false", "off", "no")


class CaptureConfigError(StrandsTitoError, RuntimeError):
    """The tracing setup would cut or drop token data, or a setting cannot be read; fixed by the setting the message
    names."""


def capture_off(value: str | None) -> bool:
    """Whether a ``STRANDS_TITO_CAPTURE`` value switches capture off explicitly (``0``/``false``/``off``/``no``)."""
    return (value or "").strip().lower() in OFF_VALUES


@dataclass(frozen=True)
class Variable:
    """What a :class:`Settings` field is read from: the variable, its default as documented, and its meaning."""

    name: str
    default: str
    meaning: str
    #: For a deprecated variable: what to set instead (it still works for one release, with a warning).
    replacement: str | None = None


def _var(name: str, shown: str, meaning: str, replacement: str | None = None) -> dict[str, Variable]:
    return {"variable": Variable(name, shown, meaning, replacement)}


# -- readers: the raw text of a variable (already stripped, non-empty) to the field's value ---------------------------


def _positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise CaptureConfigError(f"{name}={raw!r} is not a positive integer")
    return value


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise CaptureConfigError(f"{name}={raw!r} is not a number of seconds >= 0")
    return value


def _choice(*choices: str) -> Callable[[str, str], str]:
    def read(name: str, raw: str) -> str:
        value = raw.lower()
        if value not in choices:
            raise CaptureConfigError(f"{name}={raw!r}: use one of {', '.join(choices)}")
        return value

    return read


def _lenient_choice(*choices: str) -> Callable[[str, str], str]:
    """Like :func:`_choice`, for a setting where another value never lost data: a warning and the first choice."""

    def read(name: str, raw: str) -> str:
        value = raw.lower()
        if value not in choices:
            logger.warning("%s=<%s> | unknown value; using %s (one of %s)", name, raw, choices[0], ", ".join(choices))
            return choices[0]
        return value

    return read


def _on_unless_off(name: str, raw: str) -> bool:
    return not capture_off(raw)


def _on(name: str, raw: str) -> bool:
    return raw.lower() in ON_VALUES


def _text(name: str, raw: str) -> str:
    return raw


def _path(name: str, raw: str) -> Path:
    return Path(os.path.expanduser(raw))


@dataclass(frozen=True)
class Settings:
    """The agent side's settings (capture, delivery, the stock-OpenAI capture, the offline tools), one per process.

    Each field's metadata holds its :class:`Variable`; :meth:`from_environ` reads them all.
    """

    capture: str = field(
        default="",
        metadata=_var(
            "STRANDS_TITO_CAPTURE",
            "(unset)",
            "switch capture on: `1` (OTLP when an endpoint is set), `otlp`, `jsonl:PATH` (trajectories assembled in "
            "process), comma-separated; `0` keeps token data off spans",
        ),
    )
    output: str = field(
        default="",
        metadata=_var(
            "STRANDS_TITO_OUTPUT",
            "(unset)",
            "deprecated: a JSONL file for trajectories assembled in process",
            "STRANDS_TITO_CAPTURE=jsonl:PATH",
        ),
    )
    spans: str = field(
        default="capture",
        metadata=_var(
            "STRANDS_TITO_SPANS",
            "capture",
            "deprecated: `all` records every span in a provider capture installs (`capture`: only those it reads)",
            "OTEL_TRACES_SAMPLER=parentbased_always_on",
        ),
    )
    span_content: bool = field(
        default=False,
        metadata=_var(
            "STRANDS_TITO_SPAN_CONTENT",
            "0",
            "deprecated: `1` keeps the conversation text on Strands' spans",
            "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental",
        ),
    )
    span_encoding: Literal["packed", "array"] = field(
        default="packed",
        metadata=_var(
            "STRANDS_TITO_SPAN_ENCODING",
            "packed",
            "token ids and logprobs on spans as int32/float32 bytes (`packed`) or plain arrays (`array`, for "
            "trace viewers)",
        ),
    )
    spool: bool = field(
        default=True,
        metadata=_var(
            "STRANDS_TITO_SPOOL",
            "1",
            "`0` sends strands-tito spans through the SDK's plain BatchSpanProcessor (drops them when its queue is "
            "full) instead of the disk spool",
        ),
    )
    spool_dir: Path | None = field(
        default=None,
        metadata=_var(
            "STRANDS_TITO_SPOOL_DIR",
            "~/.cache/strands-tito/spool",
            "where spans the collector has not acknowledged wait (default under `$XDG_CACHE_HOME` when set)",
        ),
    )
    spool_max_bytes: int = field(
        default=2 * 1024**3,
        metadata=_var(
            "STRANDS_TITO_SPOOL_MAX_BYTES",
            "2147483648",
            "undelivered bytes (memory and disk) past which turn spans are dropped, counted and named in the end "
            "signal",
        ),
    )
    spool_queue_spans: int = field(
        default=2048,
        metadata=_var("STRANDS_TITO_SPOOL_QUEUE_SPANS", "2048", "spans held in memory before the spool writes to disk"),
    )
    spool_queue_bytes: int = field(
        default=256 * 1024**2,
        metadata=_var(
            "STRANDS_TITO_SPOOL_QUEUE_BYTES", "268435456", "bytes held in memory before the spool writes to disk"
        ),
    )
    flush_timeout: float = field(
        default=10.0,
        metadata=_var(
            "STRANDS_TITO_FLUSH_TIMEOUT",
            "10",
            "seconds the exit flush waits for the collector's acknowledgement (what is left stays in the spool); "
            "no wait at all for an endpoint capture reported as unreachable or wrong that still fails at exit",
        ),
    )
    max_image_bytes: int = field(
        default=DEFAULT_MAX_IMAGE_BYTES,
        metadata=_var(
            "STRANDS_TITO_MAX_IMAGE_BYTES",
            str(DEFAULT_MAX_IMAGE_BYTES),
            "largest image carried on a span; a larger one goes as its hash only (the trajectory is then incomplete)",
        ),
    )
    openai_flavor: Literal["auto", "vllm", "sglang"] = field(
        default="auto",
        metadata=_var(
            "STRANDS_TITO_OPENAI_FLAVOR",
            "auto",
            "how a stock `OpenAIModel` asks for token ids: `auto` (stream; once per server, retry non-streaming on "
            "SGLang's 400), `sglang` (non-streaming from the start), `vllm` (always stream)",
        ),
    )
    agl_event_url: str = field(
        default="",
        metadata=_var(
            "AGL_EVENT_URL",
            "(unset)",
            "set by Agent Lightning's runner: the rollout and attempt ids parsed from it go on every strands-tito span",
        ),
    )
    cache: Path | None = field(
        default=None,
        metadata=_var(
            "STRANDS_TITO_CACHE",
            "~/.cache/strands-tito",
            "cache of the offline tokenizers and chat templates (tests, demo)",
        ),
    )
    family: str | None = field(
        default=None,
        metadata=_var("STRANDS_TITO_FAMILY", "(unset: Qwen3)", "the model family `strands-tito demo` runs"),
    )
    torch_python: str | None = field(
        default=None,
        metadata=_var(
            "STRANDS_TITO_TORCH_PYTHON",
            "(unset: the Python running the command)",
            "a Python with torch and transformers that `strands-tito verify` runs the model in (its `--python`)",
        ),
    )

    @property
    def capture_on(self) -> bool:
        """False only when ``STRANDS_TITO_CAPTURE`` switches capture off (``0``/``false``/``off``/``no``)."""
        return not capture_off(self.capture)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
        """Read every variable (``os.environ`` unless given); a deprecated one that is set logs one warning.

        Raises:
            CaptureConfigError: a value that cannot be read, naming the variable (``strict=False``: a warning, and
                that setting keeps its default).
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            var = variable(item.name)
            raw = env.get(var.name, "").strip()
            if not raw:
                continue
            try:
                values[item.name] = _READERS[item.name](var.name, raw)
            except CaptureConfigError as error:
                if strict:
                    raise
                logger.warning("strands-tito: %s; using the default", error)
            if var.replacement is not None:
                _warn_deprecated(var)
        return cls(**values)


_READERS: Final[dict[str, Callable[[str, str], Any]]] = {
    "capture": _text,
    "output": _text,
    "spans": _choice("capture", "all"),
    "span_content": _on,
    "span_encoding": _lenient_choice("packed", "array"),
    "spool": _on_unless_off,
    "spool_dir": _path,
    "spool_max_bytes": _positive_int,
    "spool_queue_spans": _positive_int,
    "spool_queue_bytes": _positive_int,
    "flush_timeout": _seconds,
    "max_image_bytes": _positive_int,
    "openai_flavor": _lenient_choice("auto", "vllm", "sglang"),
    "agl_event_url": _text,
    "cache": _path,
    "family": _text,
    "torch_python": _text,
}

_warned: set[str] = set()


def _warn_deprecated(var: Variable) -> None:
    if var.name not in _warned:
        _warned.add(var.name)
        logger.warning("strands-tito: %s is deprecated and goes in the next release; set %s", var.name, var.replacement)


def variable(name: str) -> Variable:
    """The :class:`Variable` of the :class:`Settings` field ``name``."""
    found: Variable = Settings.__dataclass_fields__[name].metadata["variable"]
    return found


_current: Settings | None = None
_lock = threading.Lock()


def get_settings() -> Settings:
    """The process's settings: those read when capture was switched on (:func:`reload_settings`), else read from the
    environment now, once; there a value that cannot be read is logged and left at its default, since a program that
    did not switch capture on must not stop for a capture setting."""
    current = _current
    return current if current is not None else reload_settings(strict=False)


def reload_settings(environ: Mapping[str, str] | None = None, *, strict: bool = True) -> Settings:
    """Read the environment now and keep the result (capture calls it when it is switched on).

    Raises:
        CaptureConfigError: a value that cannot be read, naming the variable (unless ``strict`` is False).
    """
    global _current
    settings = Settings.from_environ(environ, strict=strict)
    with _lock:
        _current = settings
    return settings


def reset_settings() -> None:
    """Forget the settings read so far: the next :func:`get_settings` reads the environment again, and warns again
    about a deprecated variable (for tests)."""
    global _current
    with _lock:
        _current = None
        _warned.clear()


def markdown_table() -> str:
    """The variables as the Markdown table in ``docs/settings.md`` (a test keeps the two equal)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for item in fields(Settings):
        var = variable(item.name)
        meaning = f"{var.meaning}; use `{var.replacement}`" if var.replacement else var.meaning
        rows.append(f"| `{var.name}` | `{var.default}` | {meaning} |")
    return "\n".join(rows)
