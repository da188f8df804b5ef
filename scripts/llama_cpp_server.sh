#!/usr/bin/env bash
# Install llama-cpp-python's OpenAI-compatible server for the live endpoint tests (tests/llmdoctor/test_endpoint_live.py).
#
# llama-cpp-python ships on PyPI as a source distribution only: installing it compiles llama.cpp (~15 minutes on 2
# cores). The wheel is built once into ~/.cache/llmdoctor/wheels (LLMDOCTOR_CACHE overrides the root) and reused;
# the [server] extra's dependencies (fastapi, uvicorn, ...) come from the index. Nothing to do when this version is
# installed and importable. Called by scripts/setup.sh --test.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VERSION=0.3.36
CACHE="${LLMDOCTOR_CACHE:-$HOME/.cache/llmdoctor}/wheels"

installed() {
    "$PYTHON" - "$VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata, sys
assert importlib.metadata.version("llama_cpp_python") == sys.argv[1]
import llama_cpp.server.app  # the [server] extra's dependencies are there too
PY
}

if installed; then exit 0; fi
mkdir -p "$CACHE"
if ! ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
    echo "setup: building the llama-cpp-python $VERSION wheel (compiles llama.cpp, ~15 min on 2 cores) into $CACHE" >&2
    scratch=$(mktemp -d "$CACHE/.build.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    started=$(date +%s)
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} nice "$PYTHON" -m pip wheel -q --no-deps \
        "llama-cpp-python==$VERSION" -w "$scratch"
    mv "$scratch"/llama_cpp_python-"$VERSION"-*.whl "$CACHE"/   # whole file into place: a parallel run never sees half
    echo "setup: llama-cpp-python wheel built in $(( $(date +%s) - started )) s" >&2
fi
"$PYTHON" -m pip install -q "llama-cpp-python[server]==$VERSION" --find-links "$CACHE"
installed
