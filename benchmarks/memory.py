"""Peak memory and wall time of `llmdoctor check` under a hard memory cap.

    python benchmarks/memory.py MODEL_DIR --cap 3 [--quick] [--budget 2.5GiB] [--streaming] [-- CHECK ARGS]

Runs the check inside ../shared/tools/memcap (beside the repository) (a cgroup memory limit; page cache counts but
is reclaimable) and prints: completed or killed, the cgroup's peak against the weight file size (the "x file"
ratio), the plan's predicted peak against the peak the run measured itself (the report's `plan.actual.peak_bytes`:
VmHWM), wall time, the passes and GB the engine actually read; last, the run as one row of docs/memory.md's table.
Build large shape-faithful models with scripts/make_synthetic_model.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMCAP = os.environ.get("LLMDOCTOR_MEMCAP", str(Path(__file__).resolve().parents[2] / "shared" / "tools" / "memcap"))


def weight_bytes(model: Path) -> int:
    if model.is_file():                                   # a .gguf file
        return model.stat().st_size
    return sum(p.stat().st_size for p in [*model.glob("*.safetensors"), *model.glob("*.gguf")])


def gib(n) -> str:
    return f"{n / 2**30:.2f} GiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--cap", type=float, required=True, help="GiB")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--budget", default=None, help="--memory-budget for the check (default: the planner's)")
    ap.add_argument("--streaming", action="store_true", help="LLMDOCTOR_STREAMING=1 (stream a model that fits)")
    ap.add_argument("--keep-report", type=Path, default=None, help="copy the JSON report here")
    ap.add_argument("--label", default=None, help="the model's name in the table row")
    args, rest = ap.parse_known_args(argv)
    args.rest = [a for a in rest if a != "--"]           # more check arguments, e.g. -- --select GLD002
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [MEMCAP, str(args.cap), sys.executable, "-m", "llmdoctor", "check", str(args.model), "--no-config",
               "--format", "json", "-o", str(report), *(["--quick"] if args.quick else []),
               *(["--memory-budget", args.budget] if args.budget else []), *args.rest]
        env = {**os.environ, **({"LLMDOCTOR_STREAMING": "1"} if args.streaming else {})}
        started = time.perf_counter()
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - started
        line = next((text for text in run.stderr.splitlines() if text.startswith("memcap:")), "")
        plan_line = next((text for text in run.stderr.splitlines() if text.startswith("plan:")), "")
        peak = float(re.search(r"peak ([0-9.]+) GiB", line).group(1)) if "peak" in line else float("nan")
        kills = re.search(r"oom kills (\S+)", line)
        data = json.loads(report.read_text()) if report.exists() else None
        if data is not None and args.keep_report:
            args.keep_report.write_text(report.read_text())
    size = weight_bytes(args.model)
    print(f"model {args.model} ({size / 2**30:.2f} GiB of weights), cap {args.cap} GiB, "
          f"{'--quick' if args.quick else 'full'} check")
    print(f"  exit {run.returncode}, oom kills {kills.group(1) if kills else '?'}, wall {wall:.0f} s")
    print(f"  peak {peak:.2f} GiB = {peak * 2**30 / size:.2f} x the weight file")
    print(f"  {plan_line}")
    row = None
    if data and data.get("plan"):
        plan, actual = data["plan"], data["plan"]["actual"]
        read = actual.get("bytes_read") or 0
        measured = actual.get("peak_bytes")
        print(f"  engine: {plan['mode']}, {actual.get('passes')} passes, {read / 1e9:.1f} GB read")
        if measured and plan.get("predicted_peak_bytes"):
            print(f"  predicted peak {gib(plan['predicted_peak_bytes'])}, measured {gib(measured)} "
                  f"({actual.get('peak_source')}): {measured / plan['predicted_peak_bytes']:.2f} x the prediction")
        run_label = ("`--quick`" if args.quick else "full check") + \
            (f", `--memory-budget {args.budget}`" if args.budget else ", default budget") + \
            (", forced streaming" if args.streaming else "") + f", {args.cap:g} GiB cap"
        row = (f"| {args.label or args.model.name} ({gib(size)}) | {run_label} | {plan['mode']} | "
               f"{gib(plan.get('predicted_peak_bytes') or 0)} | {gib(measured or 0)} | {peak:.2f} GiB "
               f"({peak * 2**30 / size:.2f}x) | {actual.get('passes')}, {read / 1e9:.1f} GB | {wall:.0f} s |")
        print(f"  findings: {len(data['findings'])} "
              f"({sum(f['severity'] == 'error' for f in data['findings'])} errors): "
              + ", ".join(sorted(f"{f['check']}:{f['severity']}" for f in data["findings"])))
        slow = sorted(data["checks"], key=lambda c: -c.get("duration_s", 0))[:6]
        print("  slowest checks: " + ", ".join(f"{c.get('id', c.get('check'))} {c.get('duration_s', 0):.0f} s"
                                               for c in slow))
    elif run.returncode:
        print("  " + "\n  ".join(run.stderr.strip().splitlines()[-3:]))
    if row:
        print("| model | run | plan | predicted peak | measured peak | cgroup peak | passes, read | wall |")
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
