"""Where a batch-1 decode step's time goes, and how fast each torch kernel reads this model's projections.

    python benchmarks/decode_profile.py [--dtype float32|bfloat16] [--threads 1] [--repeats 5] [--steps 16]

SmolLM2-135M-Instruct (or --model), one thread by default; every figure is CPU time of this process (the figure a
loaded machine disturbs least, see docs/performance.md): a step is its best round, a call the median of its calls:
1. the step split: decode steps as the engine runs them, each projection call timed inside them, so
   "projections" and "everything else" (norms, RoPE, attention, KV writes, dispatch, Python) come from the same
   steps at a fixed context length; and the same steps with every projection replaced by an empty output of the
   right shape (what everything else costs when no weights pass through the caches between those ops);
2. the projections alone, read in a step's order (layer after layer, then the LM head, so each weight comes from
   memory as in a real step, not from a cache it was just read into), for each kernel torch offers on this
   device: F.linear on the plain weights (MKL / oneDNN matmul), oneDNN on the packed weights (core/linear.py),
   torch.mv, in interleaved rounds; median microseconds per call and GB/s of weights read per projection (told
   apart by weight shape), and the sum per step. The row the engine runs is marked. Rows = tokens per step
   (1: batch-1 decode; --rows 16: sixteen sequences).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_engine.core.linear import decode_linear, pack_for_decode  # noqa: E402
from reference_engine.engine import Engine  # noqa: E402

ROLES = ("qkv", "o", "gate_up", "down")


def empty_projection(x: torch.Tensor, weight: torch.Tensor, bias=None) -> torch.Tensor:
    """A projection that reads no weights: the right output shape, nothing computed."""
    return x.new_zeros(x.shape[0], weight.size(0))


def decode_rounds(core, seq, steps: int) -> None:
    """`steps` decode steps of one sequence, each rolled back, so every step runs at the same context length."""
    length = core.cache.length(seq)
    for i in range(steps):
        core.decode([seq], [100 + i])
        core.cache.truncate(seq, length)


def best_step_with(core, linear, steps: int, repeats: int) -> float:
    """CPU seconds of a decode step (best round) with the decode projection swapped for `linear`."""
    real = core.decode_projection
    weights = real(1)[1]
    core.decode_projection = lambda rows: (linear, weights)
    best = float("inf")
    try:
        for _ in range(repeats):
            start = time.process_time()
            decode_rounds(core, "profile", steps)
            best = min(best, (time.process_time() - start) / steps)
    finally:
        core.decode_projection = real
    return best


def steps_without_projections(core, steps: int, repeats: int) -> float:
    """CPU seconds of a decode step with every projection replaced by an empty output (best round)."""
    return best_step_with(core, empty_projection, steps, repeats)


def in_step_projections(core, steps: int, repeats: int) -> tuple[float, dict[str, float]]:
    """(CPU seconds of a decode step, {role: median CPU seconds per call}) with each projection call timed inside
    real decode steps; the step time is the best round's (the timers add ~1 us per call)."""
    linear = core.decode_projection(1)[0]
    roles = {tuple(w.size()): role for role, w in step_weights(core.weights)}
    times = defaultdict(list)

    def timed(x, w, b=None):
        start = time.thread_time_ns()
        out = linear(x, w, b)
        times[roles.get(tuple(w.size()), str(tuple(w.size())))].append(time.thread_time_ns() - start)
        return out
    best = best_step_with(core, timed, steps, repeats)
    return best, {role: statistics.median(ns) / 1e9 for role, ns in times.items()}


def step_weights(weights) -> list[tuple[str, torch.Tensor]]:
    """(role, weight) in the order a decode step reads them."""
    order = [(role, getattr(w, role)) for w in weights.layers for role in ROLES if getattr(w, role) is not None]
    return order + [("lm_head", weights.lm_head)]


def kernels(core) -> dict[str, tuple]:
    """name -> (projection, weights it reads) for every kernel worth comparing on this device."""
    plain = core.weights
    found = {"F.linear, plain weights": (F.linear, plain)}
    packed = pack_for_decode(plain)
    if packed is not plain:
        found["oneDNN, packed weights"] = (decode_linear, packed)
    found["torch.mv, plain weights"] = (lambda x, w, b=None: torch.mv(w, x[0])[None], plain)
    return found


def time_projections(fn, weights, rows: int, dtype, device) -> dict[str, list[int]]:
    """CPU nanoseconds of each call of one step's projections, by role."""
    times = defaultdict(list)
    for role, w in step_weights(weights):
        x = torch.randn(rows, w.size(1), dtype=dtype, device=device)
        start = time.thread_time_ns()
        fn(x, w)
        times[role].append(time.thread_time_ns() - start)
    return times


def projection_table(core, rows: int, repeats: int) -> None:
    found = kernels(core)
    if rows > 1:
        found.pop("torch.mv, plain weights")
    engine_fn, _ = core.decode_projection(rows)
    samples = {name: defaultdict(list) for name in found}
    with torch.inference_mode():
        for _ in range(repeats):
            for name, (fn, weights) in found.items():
                for role, ns in time_projections(fn, weights, rows, core.dtype, core.device).items():
                    samples[name][role].extend(ns)
    sizes = {role: w.numel() * w.element_size() for role, w in step_weights(core.weights)}
    calls = defaultdict(int)
    for role, _ in step_weights(core.weights):
        calls[role] += 1
    print(f"\nprojections alone, {rows} row(s), read in a step's order (median us per call, GB/s of weights read)")
    header = "".join(f"{role:>18}" for role in (*ROLES, "lm_head"))
    print(f"{'kernel':<28}{header}{'sum per step':>15}")
    for name, (fn, _) in found.items():
        cells, total = [], 0.0
        for role in (*ROLES, "lm_head"):
            if role not in samples[name]:
                cells.append(f"{'-':>18}")
                continue
            us = statistics.median(samples[name][role]) / 1e3
            total += us * calls[role]
            cells.append(f"{us:>8.0f} {sizes[role] / us / 1e3:>5.1f} GB/s")
        mark = " *" if fn is engine_fn else ""
        print(f"{name + mark:<28}{''.join(cells)}{total / 1e3:>12.1f} ms")
    print("* = the kernel the engine's decode step runs at this row count")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: SmolLM2 from tests/assets)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16, help="decode steps per round of the step split")
    parser.add_argument("--context", type=int, default=64, help="tokens in the cache during the decode steps")
    parser.add_argument("--rows", type=int, nargs="+", default=[1], help="rows per step for the projection table")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.model is None:
        from tests.assets import smollm2_dir
        args.model = smollm2_dir()
    core = Engine.from_pretrained(args.model, device=args.device, dtype=args.dtype).core
    core.prefill(["profile"], [list(range(1000, 1000 + args.context))])
    decode_rounds(core, "profile", 2)                        # warm-up: the packed copy, first-call allocations
    print(f"model {args.model.name}, {args.device} {args.dtype}, {torch.get_num_threads()} thread(s), batch-1 decode "
          f"at context {args.context + 1}, best of {args.repeats} interleaved rounds of {args.steps} steps (CPU time)")
    step, per_call = in_step_projections(core, args.steps, args.repeats)
    rest = steps_without_projections(core, args.steps, args.repeats)
    counts = defaultdict(int)
    for role, _ in step_weights(core.weights):
        counts[role] += 1
    calls = sum(per_call[role] * counts[role] for role in per_call)
    print(f"decode step {step * 1e3:.1f} ms = projection calls {calls * 1e3:.1f} ms ({calls / step:.0%}) + everything "
          f"else {(step - calls) * 1e3:.1f} ms ({(step - calls) / step:.0%})")
    print("projection calls timed inside the steps, median per call: "
          + ", ".join(f"{role} {seconds * 1e6:.0f} us" for role, seconds in per_call.items()))
    print(f"the same steps with the projections removed: {rest * 1e3:.1f} ms (nothing then streams through the "
          f"caches between the other ops: their code and data stay cached)")
    for rows in args.rows:
        projection_table(core, rows, args.repeats)


if __name__ == "__main__":
    main()
