"""Everything strands-tito uses of transformers that is not its public API.

Checked against transformers 5.0.0 and 5.24.0 (``CHECKED``), read in ``transformers/utils/chat_template_utils.py``:

* ``chat_template_utils._compile_jinja_template(source)``: the jinja2 template transformers renders a chat template
  with, compiled in its ``ImmutableSandboxedEnvironment``. Its environment is the reference for the options,
  extensions, filters and globals of the one strands-tito renders list-changing templates in
  (:mod:`strands_tito.providers.rendering`); :func:`compiled_chat_template` returns it.
"""

from __future__ import annotations

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from transformers.utils import chat_template_utils

from strands_tito.upstream import UpstreamChangedError

__all__ = ["CHECKED", "DISTRIBUTION", "compiled_chat_template", "verify"]

DISTRIBUTION = "transformers"
#: The versions whose source this module was checked against.
CHECKED = ">=5.0.0,<5.25"

_COMPILE = "_compile_jinja_template"


def _changed(what: str) -> UpstreamChangedError:
    return UpstreamChangedError(DISTRIBUTION, CHECKED, what)


def compiled_chat_template(source: str) -> jinja2.Template:
    """The chat template ``source`` as transformers compiles it (its own environment, options and globals).

    Raises:
        UpstreamChangedError: transformers no longer compiles chat templates where it did.
    """
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
    environment = compiled_chat_template("{{ messages | tojson }}").environment
    if not isinstance(environment, ImmutableSandboxedEnvironment):
        kind = type(environment).__name__
        raise _changed(f"chat templates compile in a {kind}, not an ImmutableSandboxedEnvironment")
    if "raise_exception" not in environment.globals:
        raise _changed("the chat-template environment has no raise_exception global")
