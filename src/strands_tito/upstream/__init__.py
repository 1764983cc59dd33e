"""The only places strands-tito reaches into its upstream libraries: one module per upstream.

* :mod:`~strands_tito.upstream.strands_sdk`: Strands (``strands-agents``): the per-agent ``model_state``, the
  tracer singleton, and the two patches capture makes (``Tracer.__init__``, ``OpenAIModel``).
* :mod:`~strands_tito.upstream.opentelemetry_sdk`: the OpenTelemetry SDK: the span limits a span and a tracer
  provider enforce, and the names of modules and loggers that are not part of its API.
* :mod:`~strands_tito.upstream.transformers_lib`: transformers: the Jinja environment it compiles chat templates in.

Each module states the versions it was checked against (``CHECKED``) and offers ``verify()``, which raises
:class:`UpstreamChangedError` naming the upstream, its installed version and what moved; the tests run every
``verify()``, so an upgrade that moves something fails there first. At run time a moved name raises the same error
where it is used, never a bare ``AttributeError``. No other product module may touch a non-public name of these
libraries or patch their classes (``tests/test_architecture.py``).

Each module imports only its own library, and only the lowest layer that uses it imports the module (capture the
first two, the providers the third).
"""

from __future__ import annotations

from importlib import metadata

from strands_tito.errors import StrandsTitoError

__all__ = ["UpstreamChangedError", "installed_version"]


class UpstreamChangedError(StrandsTitoError, RuntimeError):
    """A name strands-tito relies on moved in the installed version of an upstream library."""

    def __init__(self, distribution: str, checked: str, what: str) -> None:
        super().__init__(
            f"{distribution} {installed_version(distribution)}: {what}; strands-tito was checked against "
            f"{distribution} {checked} (install a version in that range, or a strands-tito that supports yours)"
        )
        self.distribution = distribution


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``"not installed"`` when it is not)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"
