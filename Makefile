# The two entry points a newcomer needs; both set everything up on a fresh machine first.
.PHONY: demo test lint setup

setup:
	@scripts/bootstrap.sh

# Main job on the embedded default: local SGLang-protocol engine + an example agent with a tool.
demo: setup
	.venv/bin/strands-tito demo

PY_PATHS := $(wildcard src tests examples benchmarks scripts)

lint: setup
	.venv/bin/ruff check $(PY_PATHS)
	.venv/bin/ruff format --check $(PY_PATHS)
	.venv/bin/mypy

# Whole suite: lint, type check, tests.
test: lint
	.venv/bin/python -m pytest -q
