"""strands-tito's interpreter start-up hook: trace capture switched on by ``STRANDS_TITO_CAPTURE``, no code change.

The package installs ``strands_tito_startup.pth`` into site-packages; Python's ``site`` module runs its one line,
``import strands_tito_startup``, whenever an interpreter of that environment starts (before ``sitecustomize``, so
before ``opentelemetry-instrument`` configures anything). This module therefore has to be cheap:

* ``STRANDS_TITO_CAPTURE`` unset and no ``AGL_EVENT_URL``: it imports nothing.
* Either set: it reads the agent side's settings (:mod:`strands_tito.settings`, standard library only; the package's
  ``__init__`` loads nothing else), the one reader of every ``STRANDS_TITO_*`` variable. Capture switched off
  (``0``/``false``/``off``/``no``): nothing more. The check above is the one read outside that module: whether
  either variable is set at all, so that an interpreter that asks for nothing imports nothing.
* ``AGL_EVENT_URL`` set (Agent Lightning's runner) and capture not disabled: it adds the rollout and attempt ids to
  ``OTEL_RESOURCE_ATTRIBUTES`` (stdlib only), so whichever tracer provider is built later, by the application
  (``StrandsTelemetry()``) or by ``opentelemetry-instrument``'s configurator, carries them. ``AGL_KEY`` is never read.
* ``STRANDS_TITO_CAPTURE`` asks for capture (``1``; also ``otlp``, ``jsonl:PATH``, comma-separated; exported over
  OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set): only then does it
  import strands_tito (which pulls in transformers) and hand over to :func:`strands_tito.capture.switch_on.start_up`,
  which checks the settings, exits the process at once if they would lose data, and attaches capture lazily.

``python -S`` (no ``site``) skips it; ``strands_tito.capture.switch_on.start_up()`` does the same from code.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not from typing: this module imports only what it uses
if TYPE_CHECKING:
    from collections.abc import MutableMapping

ENV_CAPTURE = "STRANDS_TITO_CAPTURE"  # strands_tito.settings' variable of ``capture`` (a test keeps the two equal)


def add_agentlightning_resource(environ: MutableMapping[str, str], event_url: str) -> None:
    """Append the Agent Lightning ids in ``event_url`` (``AGL_EVENT_URL``) to ``OTEL_RESOURCE_ATTRIBUTES`` (keys
    already there are left as they are)."""
    from strands_tito.records import agentlightning_identity_of

    identity = agentlightning_identity_of(event_url)
    if not identity:
        return
    from urllib.parse import quote

    existing = environ.get("OTEL_RESOURCE_ATTRIBUTES", "").strip().strip(",")
    present = {item.split("=", 1)[0].strip() for item in existing.split(",") if "=" in item}
    extra = [f"{key}={quote(value, safe='')}" for key, value in identity.items() if key not in present]
    if extra:
        environ["OTEL_RESOURCE_ATTRIBUTES"] = ",".join([existing, *extra] if existing else extra)


def main(environ: MutableMapping[str, str] | None = None) -> None:
    """What the ``.pth`` line runs."""
    env = os.environ if environ is None else environ
    asked, event_url = env.get(ENV_CAPTURE, "").strip(), env.get("AGL_EVENT_URL", "").strip()
    if not asked and not event_url:
        return  # the common case: nothing asked for, nothing imported
    from strands_tito.settings import CaptureConfigError, Settings

    try:
        settings = Settings.from_environ(env)
    except CaptureConfigError:  # start_up below reads them again, reports the error and stops the process
        settings = Settings(capture=asked, agl_event_url=event_url)
    if not settings.capture_on:
        return
    if settings.agl_event_url:
        add_agentlightning_resource(env, settings.agl_event_url)
    if settings.capture:
        from strands_tito.capture.switch_on import start_up

        start_up()


main()
