"""Everything strands-tito uses of transformers that is not its public API.

Checked against transformers 5.0.0 and 5.24.0 (``CHECKED``), read in ``transformers/utils/chat_template_utils.py``
and ``transformers/__init__.py``:

* ``chat_template_utils._compile_jinja_template(source)``: the jinja2 template transformers renders a chat template
  with, compiled in its ``ImmutableSandboxedEnvironment``. Its environment is the reference for the options,
  extensions, filters and globals of the one strands-tito renders list-changing templates in
  (:mod:`strands_tito.providers.rendering`); :func:`compiled_chat_template` returns it.
* Imported without PyTorch, ``transformers/__init__.py`` logs ``PyTorch was not found. Models won't be available
  ...`` through its ``transformers`` logger (``logger.warning_advice``), printed as ``[transformers] PyTorch was not
  found...`` on stderr. strands-tito uses only transformers' tokenizers and chat templates, which need no PyTorch, so
  the notice reads like a broken install where nothing is wrong. :func:`hide_torch_notice` drops exactly that record
  (a filter on that logger) and nothing else: transformers' other warnings still show, and no environment variable
  changes for the program or the processes it starts. The package ``strands_tito`` calls it when it is imported,
  before any of its modules imports transformers; this module imports transformers and jinja2 only when used.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from strands_tito.upstream import UpstreamChangedError

if TYPE_CHECKING:
    import jinja2

__all__ = ["CHECKED", "DISTRIBUTION", "compiled_chat_template", "hide_torch_notice", "verify"]

DISTRIBUTION = "transformers"
#: The versions whose source this module was checked against.
CHECKED = ">=5.0.0,<5.25"

_COMPILE = "_compile_jinja_template"
#: The logger transformers' package logs its import-time notices through, and how the PyTorch one begins.
_LOGGER = "transformers"
_TORCH_NOTICE = "PyTorch was not found."


class _WithoutTorchNotice(logging.Filter):
    """Drops transformers' notice that PyTorch is missing; lets every other record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(_TORCH_NOTICE))


def hide_torch_notice() -> None:
    """Keep transformers from printing that PyTorch was not found (strands-tito never needs PyTorch).

    Takes effect for a transformers imported after the call; calling it again adds nothing.
    """
    logger = logging.getLogger(_LOGGER)
    if not any(isinstance(existing, _WithoutTorchNotice) for existing in logger.filters):
        logger.addFilter(_WithoutTorchNotice())


def _changed(what: str) -> UpstreamChangedError:
    return UpstreamChangedError(DISTRIBUTION, CHECKED, what)


def compiled_chat_template(source: str) -> jinja2.Template:
    """The chat template ``source`` as transformers compiles it (its own environment, options and globals).

    Raises:
        UpstreamChangedError: transformers no longer compiles chat templates where it did.
    """
    import jinja2
    from transformers.utils import chat_template_utils

    compile_template = getattr(chat_template_utils, _COMPILE, None)
    if compile_template is None:
        raise _changed(f"transformers.utils.chat_template_utils has no {_COMPILE}")
    template = compile_template(source)
    if not isinstance(template, jinja2.Template):
        raise _changed(f"chat_template_utils.{_COMPILE} returned a {type(template).__name__}, not a jinja2 Template")
    return template


def verify() -> None:
    """Check that everything this module relies on is where it was in the checked versions.

    Raises:
        UpstreamChangedError: naming what moved.
    """
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils import logging as transformers_logging

    environment = compiled_chat_template("{{ messages | tojson }}").environment
    if not isinstance(environment, ImmutableSandboxedEnvironment):
        kind = type(environment).__name__
        raise _changed(f"chat templates compile in a {kind}, not an ImmutableSandboxedEnvironment")
    if "raise_exception" not in environment.globals:
        raise _changed("the chat-template environment has no raise_exception global")
    library_logger: object = transformers_logging.get_logger(_LOGGER)
    if library_logger is not logging.getLogger(_LOGGER):
        raise _changed(f"transformers no longer logs through the standard logger {_LOGGER!r}")
    spec = importlib.util.find_spec(DISTRIBUTION)
    source = Path(spec.origin).read_text(encoding="utf-8") if spec is not None and spec.origin else ""
    if f'"{_TORCH_NOTICE}' not in source:
        raise _changed(f"transformers/__init__.py no longer logs {_TORCH_NOTICE!r} (hide_torch_notice matches it)")
