#!/usr/bin/env bash
# Install llmdoctor into the current Python; `--test` adds the test extras (the Hugging Face oracles, hypothesis, ...).
#
# torch: on a machine without an NVIDIA GPU we install the CPU build first (`torch==2.13.0` is a local CPU wheel on our
# build machines; elsewhere set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to get the CPU build from PyTorch).
# With a GPU, or when torch is already installed, pip resolves torch normally, so GPU users keep their CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
extras=""
if [ "${1:-}" = "--test" ]; then extras="[test]"; fi

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if ! "$PYTHON" -c "import torch" >/dev/null 2>&1 && ! has_gpu; then
    echo "setup: no NVIDIA GPU found, installing the CPU build of torch" >&2
    "$PYTHON" -m pip install -q "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi
"$PYTHON" -m pip install -q -e ".$extras"
# the live tests run llama-cpp-python's server and llama.cpp's own llama-server: llama.cpp is compiled once for
# both, and cached (see the script)
if [ -n "$extras" ]; then PYTHON="$PYTHON" bash scripts/llama_cpp.sh; fi
# ... and vLLM's CPU build, in a venv of its own (tests/vllm_server.py; cached, offline after the first time)
if [ -n "$extras" ]; then PYTHON="$PYTHON" bash scripts/vllm.sh; fi
# the HTML report's browser test (tests/reports/test_layout.py) draws the page in chromium: installed with the
# system's package manager where this user may (root, or sudo without a password); elsewhere the test fails naming
# scripts/chromium.sh, and the rest of the setup goes on
if [ -n "$extras" ]; then bash scripts/chromium.sh || echo "setup: WARNING: no chromium (see the line above)" >&2; fi
# pyenv only exposes a new console script after a rehash
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
