#!/usr/bin/env bash
# One-shot check of the GPU paths of the probes, for the first machine with an NVIDIA GPU (CI has none):
# the real NVML boundary, copy/triad bandwidth vs the NVML peak with utilisation/GPM sampled, the decode
# roofline on a tiny factory model, the GPU checks and a triage bundle. Results go to ${OUT:-gpu_probes_out}/.
set -euo pipefail
OUT=${OUT:-gpu_probes_out}
mkdir -p "$OUT"
python -c "import torch; assert torch.cuda.is_available(), 'torch cannot see a CUDA device'; print(torch.cuda.get_device_name())"
python -m pytest tests/probes/test_nvml.py tests/probes/test_probe_bandwidth.py -q
MODEL=$(python -c "import tempfile; from reference_engine.factory import build_model_dir; print(build_model_dir(tempfile.mkdtemp() + '/m'))")
llmdoctor probe bandwidth --model "$MODEL" --format json -o "$OUT/bandwidth.json"
llmdoctor check "$MODEL" --select gpu,ENV001 --format json -o "$OUT/checks.json" --fail-on never
llmdoctor triage "$MODEL" -o "$OUT/bundle" --kv-requests 2000
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("bandwidth.json", "checks.json", "bundle/report.json"):
    for f in json.load(open(f"{out}/{name}"))["findings"]:
        if f["check"][:3] in ("GPU", "ENV"):
            print(name, f["check"], f["severity"], f["message"])
PY
