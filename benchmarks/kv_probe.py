"""KV-cache probe speed: simulated requests per wall second, per block size, through the engine's own cache.

Peers measured in the same run: real time (how many seconds of serving one wall second simulates) and the
block-256 allocation (fewest allocator operations). Prints allocator operations per second as well, so a
slowdown can be traced to the simulation or to the engine's PagedKVCache.
Usage: python benchmarks/kv_probe.py [--requests 100000] [--block-sizes 1,16,256]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.kv_sim import SimConfig, simulate  # noqa: E402
from probes.kv_workload import SyntheticSpec, synthetic  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--block-sizes", default="16,256")
    parser.add_argument("--pool-tokens", type=int, default=262_144)
    args = parser.parse_args()
    spec = SyntheticSpec(requests=args.requests, rate=100.0, prompt_median=256, output_median=128, max_total=4096)
    workload = synthetic(spec)
    print(spec.describe())
    rows = {}
    for bs in (int(b) for b in args.block_sizes.split(",")):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = simulate(workload, SimConfig(bs, args.pool_tokens // bs, label=f"block {bs}"))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        blocks = sum(-(-r.total_tokens // bs) for r in workload)
        rows[bs] = (wall, cpu, result.summary["simulated_s"], blocks)
        print(f"block {bs:>4}: {args.requests} requests in {wall:.2f} s wall ({cpu:.2f} s CPU): "
              f"{args.requests / cpu:,.0f} requests/CPU-s, {blocks / cpu:,.0f} block allocations/CPU-s, "
              f"{result.summary['simulated_s'] / cpu:,.0f}x real time; waste {result.summary['waste_ratio']:.1%}")
    if len(rows) > 1:
        ref = max(rows)
        for bs, (wall, cpu, *_rest) in sorted(rows.items()):
            if bs != ref:
                print(f"block {bs} / block {ref} CPU time: {cpu / rows[ref][1]:.2f}x")


if __name__ == "__main__":
    main()
