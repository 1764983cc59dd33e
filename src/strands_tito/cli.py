"""The ``strands-tito`` command.

``demo`` and ``engine`` belong to the testing package (:mod:`strands_tito.testing`), which no product module imports
(tests/test_architecture.py). It registers them in the ``strands_tito.commands`` entry-point group (pyproject.toml),
so this dispatcher finds them by name, the standard plugin mechanism, and never imports the harness itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: Entry-point group of the sub-commands other packages contribute (the testing package's ``demo`` and ``engine``).
COMMANDS_GROUP = "strands_tito.commands"

USAGE = """usage: strands-tito COMMAND [ARGS]

commands:
  collect   run the collector: OTLP in, trajectories out (strands-tito collect --help)
  inspect   show trajectories from a JSONL or Parquet file (strands-tito inspect --help)
  view      serve the trajectory viewer for a JSONL or Parquet file on 127.0.0.1 (strands-tito view --help)
  verify    recompute every generated token's logprob with the model and compare it with the recorded one
            (strands-tito verify --help)
  spool     list the spans agents could not deliver yet, or resend them to a collector (strands-tito spool --help)

test/dev commands (strands_tito.testing, the testing extra):
  demo      run an example agent with a tool against the local engine and print the captured trajectory
            (strands-tito demo --help; --chat-template FAMILY runs it on a model family's real template)
  engine    run the local test/dev engine, a scripted SGLang/vLLM stand-in (strands-tito engine --help)

  --version print the installed version
"""


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a sub-command; a missing optional extra is one line naming it, not a traceback."""
    from strands_tito.errors import MissingDependencyError

    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    except MissingDependencyError as e:
        print(f"strands-tito: {e}", file=sys.stderr)
        return 2


def _dispatch(args: list[str]) -> int:
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command in ("--version", "-V"):
        from importlib.metadata import version

        print(f"strands-tito {version('strands-tito')}")
        return 0
    if command == "inspect":
        from strands_tito.viewer import inspect_main

        return inspect_main(rest)
    if command == "collect":
        from strands_tito.collector.cli import collect_main

        return collect_main(rest)
    if command == "view":
        from strands_tito.viewer import view_main

        return view_main(rest)
    if command == "verify":
        from strands_tito.verify import verify_main

        return verify_main(rest)
    if command == "spool":
        from strands_tito.capture.spool_command import spool_main

        return spool_main(rest)
    if command and (plugin := _registered_command(command)) is not None:
        return plugin(rest)
    print(USAGE, file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2


def _registered_command(name: str) -> Callable[[list[str]], int] | None:
    """The ``strands_tito.commands`` entry point called ``name`` (a function of the argument list), if installed."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=COMMANDS_GROUP, name=name):
        command: Callable[[list[str]], int] = entry.load()
        return command
    return None


if __name__ == "__main__":
    sys.exit(main())
