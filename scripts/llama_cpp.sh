#!/usr/bin/env bash
# The two llama.cpp servers of the live tests, from ONE compile of llama.cpp:
#   - llama-cpp-python's OpenAI-compatible server (tests/llmdoctor/run/test_endpoint_live.py): its wheel, cached as
#     ~/.cache/llmdoctor/wheels/llama_cpp_python-<version>-*.whl and installed with the [server] extra;
#   - llama.cpp's own C++ llama-server (tests/probes/load/test_load_live.py, the serving chain), cached as
#     ~/.cache/llmdoctor/bin/llama.cpp-<version>/llama-server beside the shared libraries it links.
# Both come from the llama.cpp vendored in the llama-cpp-python sdist (the same kernels on both servers).
#
# llama-cpp-python ships on PyPI as a source distribution only, and `pip install` compiles llama.cpp into it; a
# separate llama-server build compiled the same ggml and llama a second time (~15 and ~10-25 min on 2 cores). Here
# llama.cpp is compiled once, as shared libraries (CPU only, -march=native, no weight repacking: the extra CPU
# buffer types crashed long prompts on this machine, tests/endpoint_assets.py; no web UI, no download at build
# time); llama-server links them through an $ORIGIN rpath, and llama-cpp-python's wheel is built without its own
# compile (its CMake option LLAMA_BUILD=OFF) and given the same libraries. LLMDOCTOR_CACHE overrides the cache root;
# nothing is built when both are cached, nothing installed when the version is already importable.
# Called by scripts/setup.sh --test.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VERSION=0.3.36
ROOT="${LLMDOCTOR_CACHE:-$HOME/.cache/llmdoctor}"
WHEELS="$ROOT/wheels"
SERVER_DIR="$ROOT/bin/llama.cpp-$VERSION"
WHEEL_LIBS="libllama libggml libggml-base libggml-cpu libmtmd"    # what the sdist's own build puts in llama_cpp/lib

installed() {
    "$PYTHON" - "$VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata, sys
assert importlib.metadata.version("llama_cpp_python") == sys.argv[1]
import llama_cpp.server.app  # the [server] extra's dependencies are there too
PY
}
wheel_cached() { ls "$WHEELS"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; }

build() {
    mkdir -p "$ROOT/bin" "$ROOT/sdist" "$WHEELS"
    local sdist="$ROOT/sdist/llama_cpp_python-$VERSION.tar.gz"
    if [ ! -f "$sdist" ]; then
        "$PYTHON" -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" \
            -d "$ROOT/sdist"
    fi
    scratch=$(mktemp -d "$ROOT/bin/.build.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    tar -xzf "$sdist" -C "$scratch"
    local src="$scratch/llama_cpp_python-$VERSION"
    echo "setup: compiling llama.cpp from llama-cpp-python $VERSION once, for both servers (~4 min on 2 idle" \
         "cores) into $ROOT" >&2
    local started
    started=$(date +%s)
    nice cmake -S "$src/vendor/llama.cpp" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH='$ORIGIN' \
        -DGGML_NATIVE=ON -DGGML_CPU_REPACK=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
    CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} nice cmake --build "$scratch/build" \
        --target llama-server mtmd
    echo "setup: llama.cpp compiled in $(( $(date +%s) - started )) s" >&2

    mkdir "$scratch/server"
    cp -a "$scratch/build/bin/llama-server" "$scratch/build/bin/"*.so* "$scratch/server/"
    "$scratch/server/llama-server" --version >/dev/null 2>&1     # links and starts: fail here, not in a test
    rm -rf "$SERVER_DIR"
    mv "$scratch/server" "$SERVER_DIR"      # whole directory into place: a parallel run never sees half

    # llama-cpp-python's Python package with no compile of its own, then the libraries above put into it
    CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "$PYTHON" -m pip wheel -q --no-deps --no-cache-dir \
        "$src" -w "$scratch/wheel"
    local libs=()
    for lib in $WHEEL_LIBS; do libs+=("$scratch/build/bin/$lib".so*); done
    "$PYTHON" - "$scratch/wheel"/llama_cpp_python-"$VERSION"-*.whl "$scratch/repacked" "${libs[@]}" <<'PY'
"""Add shared libraries under llama_cpp/lib/ of a wheel, each name a regular file (as the sdist's own build
ships them), and list them in its RECORD."""
import base64, hashlib, sys, zipfile
from pathlib import Path

wheel, out, libs = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
out.mkdir()
with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out / wheel.name, "w", zipfile.ZIP_DEFLATED) as dst:
    record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
    lines = []
    for lib in libs:
        data = lib.read_bytes()                       # a symlink's target: every name a whole file
        name = f"llama_cpp/lib/{lib.name}"
        info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = 0o755 << 16
        dst.writestr(info, data, zipfile.ZIP_DEFLATED)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    for item in src.infolist():
        data = src.read(item)
        if item.filename == record_name:
            data = (data.decode().rstrip("\n") + "\n" + "\n".join(lines) + "\n").encode()
        dst.writestr(item, data)
PY
    mv "$scratch/repacked"/*.whl "$WHEELS"/
}

if [ ! -x "$SERVER_DIR/llama-server" ] || { ! installed && ! wheel_cached; }; then build; fi
if ! installed; then
    "$PYTHON" -m pip install -q "llama-cpp-python[server]==$VERSION" --find-links "$WHEELS"
    installed
fi
