"""What a CI user waits for: wall time of `llmdoctor check --demo` and `llmdoctor check SmolLM2 --quick`.

    python benchmarks/check_time.py [--repeats 2] [--model DIR]

Each command runs as CI runs it: a fresh `python -m llmdoctor` process (imports, model load, every check,
the report written to a temporary file), timed from start to exit. Prints the best and worst wall time of
--repeats runs, the CPU seconds of the best run (user + system of the child), and its exit code (findings
make it non-zero; that is not a failure of the benchmark). There is no peer to compare with: the figure is the
one the README quotes. On a loaded machine the wall time grows with the load; the CPU time much less.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_once(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, child CPU seconds, exit code) of one `python -m llmdoctor` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "llmdoctor", *args, "--format", "json",
                               "-o", str(Path(tmp) / "report.json")],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):   # 1: findings at or above the fail level
        raise SystemExit(f"llmdoctor {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return wall, cpu, proc.returncode


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="default: SmolLM2-135M-Instruct (tests/assets.py)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    if args.model is None:
        from tests.assets import smollm2_dir
        args.model = smollm2_dir()
    commands = {"check --demo": ["check", "--demo"],
                f"check {args.model.name} --quick": ["check", str(args.model), "--quick"]}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start; best of {args.repeats} runs")
    print(f"{'command':<44}{'best wall s':>12}{'worst wall s':>14}{'CPU s':>8}{'exit':>6}")
    for name, cmd in commands.items():
        runs = [run_once(cmd) for _ in range(args.repeats)]
        best = min(runs)
        print(f"{name:<44}{best[0]:>12.1f}{max(r[0] for r in runs):>14.1f}{best[1]:>8.1f}{best[2]:>6}", flush=True)


if __name__ == "__main__":
    main()
