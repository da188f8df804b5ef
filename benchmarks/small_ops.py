"""The micro-benchmarks behind docs/performance.md's "What was tried and not adopted": each candidate against the
op the engine uses, in the same process, interleaved rounds, one thread, best round of each side (CPU time).

    python benchmarks/small_ops.py [--rounds 15]

- RMSNorm: ours (core/model.py rms_norm) vs torch's F.rms_norm: differences over dtypes x shapes x scales x eps,
  and the time of a warm call.
- RoPE: ours (core/rope.py apply_rope) vs a pre-negated sin table (x * cos + x.roll(half) * signed_sin).
- One-row fp32 projection: F.linear vs torch.mv (the same MKL GEMV?).
- One-row bf16 projection, weights cycled from memory (copies larger than the caches): F.linear, x @ w.T, torch.mv,
  in GB/s of weights read.
Prints each pair's ratio (candidate / ours: above 1 the candidate is slower)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_engine.core.model import rms_norm  # noqa: E402
from reference_engine.core.rope import apply_rope  # noqa: E402

HIDDEN, INTER, HEADS, HEAD_DIM = 576, 1536, 9, 64    # SmolLM2-135M's shapes
COPIES = 24                                           # bf16 [1536, 576] x 24 = 42 MB: beyond the caches


def cpu_time(fn, calls: int) -> float:
    """CPU seconds per call over `calls` calls."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls


def interleaved(pairs: dict, rounds: int, calls: int) -> dict:
    """name -> best CPU seconds per call, the candidates run round by round in turn."""
    best = {name: float("inf") for name in pairs}
    for _ in range(rounds):
        for name, fn in pairs.items():
            best[name] = min(best[name], cpu_time(fn, calls))
    return best


def rms_norm_differences() -> tuple[int, int]:
    """(cases with any difference, cases) of ours vs F.rms_norm over dtypes, shapes, scales and eps."""
    differ, cases = 0, 0
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for rows in (1, 3, 16, 64, 128, 512, 1024):
            for scale in (1e-3, 1.0, 10.0, 100.0):
                for eps in (1e-5, 1e-6):
                    x = (torch.randn(rows, HIDDEN, generator=gen) * scale).to(dtype)
                    w = (1 + 0.1 * torch.randn(HIDDEN, generator=gen)).to(dtype)
                    theirs = (w * F.rms_norm(x.float(), (HIDDEN,), eps=eps).to(dtype))
                    differ += not torch.equal(rms_norm(x, w, eps), theirs)
                    cases += 1
    return differ, cases


def rope_pair(tokens: int = 1):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, HEADS, HEAD_DIM, generator=gen)
    angles = torch.rand(tokens, HEAD_DIM // 2, generator=gen) * 100
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    signed = torch.cat([-sin[:, :HEAD_DIM // 2], sin[:, HEAD_DIM // 2:]], -1)[:, None, :]
    cos3 = cos[:, None, :]
    ours = lambda: apply_rope(x, cos, sin)                                       # noqa: E731
    rolled = lambda: x * cos3 + x.roll(HEAD_DIM // 2, -1) * signed                # noqa: E731
    return ours, rolled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    differ, cases = rms_norm_differences()
    print(f"RMSNorm vs F.rms_norm: {differ} of {cases} cases differ (fp32, bf16, fp16; 7 shapes x 4 scales x 2 eps)")
    ours, rolled = rope_pair()
    print(f"RoPE pre-negated sin vs ours: max |diff| {float((ours() - rolled()).abs().max()):.3g}")

    x = torch.randn(1, HIDDEN)
    w = torch.randn(HIDDEN, HIDDEN)
    norm = lambda: rms_norm(x, w[0], 1e-5)                                       # noqa: E731
    theirs = lambda: w[0] * F.rms_norm(x, (HIDDEN,), eps=1e-5)                    # noqa: E731
    t = interleaved({"ours": norm, "F.rms_norm": theirs}, args.rounds, 2000)
    print(f"RMSNorm warm call, 1 row: ours {t['ours'] * 1e6:.1f} us, F.rms_norm {t['F.rms_norm'] * 1e6:.1f} us "
          f"({t['F.rms_norm'] / t['ours']:.2f}x)")
    t = interleaved({"ours": ours, "rolled": rolled}, args.rounds, 2000)
    print(f"RoPE warm call, 1 token: ours {t['ours'] * 1e6:.1f} us, pre-negated sin {t['rolled'] * 1e6:.1f} us "
          f"({t['rolled'] / t['ours']:.2f}x)")

    w32 = [torch.randn(INTER, HIDDEN) for _ in range(COPIES // 2)]
    v = torch.randn(HIDDEN)
    cycle = {"k": 0}

    def cycled(op, weights):
        def run():
            cycle["k"] = (cycle["k"] + 1) % len(weights)
            op(weights[cycle["k"]])
        return run
    t = interleaved({"F.linear": cycled(lambda m: F.linear(v[None], m), w32),
                     "torch.mv": cycled(lambda m: torch.mv(m, v), w32)}, args.rounds, 200)
    gbs = lambda s, m: m.numel() * m.element_size() / s / 1e9                    # noqa: E731
    print(f"fp32 one row [{INTER}x{HIDDEN}]: F.linear {gbs(t['F.linear'], w32[0]):.1f} GB/s, torch.mv "
          f"{gbs(t['torch.mv'], w32[0]):.1f} GB/s ({t['torch.mv'] / t['F.linear']:.2f}x)")

    w16 = [m.to(torch.bfloat16) for m in w32 for _ in range(2)]
    v16 = v.to(torch.bfloat16)
    t = interleaved({"F.linear": cycled(lambda m: F.linear(v16[None], m), w16),
                     "x @ w.T": cycled(lambda m: v16[None] @ m.T, w16),
                     "torch.mv": cycled(lambda m: torch.mv(m, v16), w16)}, args.rounds, 200)
    print("bf16 one row, weights from memory: " + ", ".join(
        f"{name} {gbs(s, w16[0]):.1f} GB/s" for name, s in t.items())
        + f" (mv / F.linear {t['torch.mv'] / t['F.linear']:.2f}x)")


if __name__ == "__main__":
    main()
