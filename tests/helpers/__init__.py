"""Helpers shared by the tests, one module per topic; tests import them from here and never from each other.

- ``agents``: the local engine's agents, tools and the exact-match check;
- ``capture``: SDK spans emitted and reassembled;
- ``otlp``: OTLP requests built from trajectories, and a sink that keeps what it receives;
- ``collector``: the collector's URL and output, ``strands-tito collect`` as a process;
- ``templates``: each family's reference chat template; ``tool_calls``: one call per tool-call format;
- ``hostile_cases``: the collector's hostile-input table; ``agl_trainer``: Agent Lightning's trainer code, as shipped;
  ``slime``: slime's ``Sample`` stand-in; ``vllm_server``: a real vLLM server on CPU (the ``vllm`` tier).
"""
