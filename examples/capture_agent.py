"""The demo's agent: an ordinary Strands agent with a tool and no telemetry code (capture is switched on from outside).

It ships in the package as ``strands_tito/testing/demo_agent.py`` so that ``strands-tito demo`` works from an installed
wheel; this file runs it (``python examples/capture_agent.py`` = ``python -m strands_tito.testing.demo_agent``, same
options).
"""

import runpy

runpy.run_module("strands_tito.testing.demo_agent", run_name="__main__", alter_sys=True)
