#!/usr/bin/env bash
# Build llama.cpp's own C++ `llama-server` for the live load tests (tests/probes/load/test_load_live.py).
#
# The source is the llama.cpp vendored in the llama-cpp-python sdist that scripts/llama_cpp_server.sh already uses
# (same version, so both servers run the same kernels). Only the llama-server target is built, CPU only, static,
# without the web UI (no download at build time) and without weight repacking (the extra CPU buffer types crashed
# long prompts on this machine, see tests/endpoint_assets.py). The binary is cached as
# ~/.cache/llmdoctor/bin/llama-server-<version> (LLMDOCTOR_CACHE overrides the root); nothing to do when it is there.
# Takes 10-25 minutes on 2 idle cores (78 on a busy shared box): nice'd, CMAKE_BUILD_PARALLEL_LEVEL=2 unless set. Called by scripts/setup.sh --test.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VERSION=0.3.36
ROOT="${LLMDOCTOR_CACHE:-$HOME/.cache/llmdoctor}"
BIN="$ROOT/bin/llama-server-$VERSION"

if [ -x "$BIN" ]; then exit 0; fi
mkdir -p "$ROOT/bin" "$ROOT/sdist"
SDIST="$ROOT/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$ROOT/sdist"
fi
scratch=$(mktemp -d "$ROOT/bin/.build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
tar -xzf "$SDIST" -C "$scratch"
SRC="$scratch/llama_cpp_python-$VERSION/vendor/llama.cpp"
echo "setup: building llama-server from llama-cpp-python $VERSION's llama.cpp (~10-80 min on 2 cores) into $BIN" >&2
started=$(date +%s)
nice cmake -S "$SRC" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON -DGGML_CPU_REPACK=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >/dev/null
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} nice cmake --build "$scratch/build" --target llama-server
cp "$scratch/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"   # whole file into place: a parallel run never sees half
echo "setup: llama-server built in $(( $(date +%s) - started )) s" >&2
