"""Transformer core speed on SmolLM2-135M (float32, CPU): ours vs transformers, measured in the same run.

Prints prefill tokens/s and batch-1 decode step time for both engines, the machine's measured memory
read bandwidth, the decode roofline (weight bytes read per step / bandwidth) and how close each engine
gets to it, and the KV cache's bytes per token. Usage: python benchmarks/core.py [--prefill-tokens 512]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_engine.engine import Engine  # noqa: E402


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def read_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes/s of a streaming reduction over a buffer far larger than the caches."""
    buf = torch.ones(megabytes * (1 << 20) // 4, dtype=torch.float32)
    buf.sum()
    seconds = best_of(repeats, buf.sum)
    return buf.numel() * 4 / seconds


def ours_prefill(eng: Engine, ids: list[int]) -> None:
    eng.prefill(["bench"], [ids])
    eng.free("bench")


def median_step(step, tokens: list[int]) -> float:
    """Median wall time of one step: robust to other processes stealing the CPU for a moment."""
    times = []
    for t in tokens:
        start = time.perf_counter()
        step(t)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ours_decode(eng: Engine, prompt: list[int], steps: list[int]) -> float:
    eng.prefill(["bench"], [prompt])
    seconds = median_step(lambda t: eng.decode(["bench"], [t]), steps)
    eng.free("bench")
    return seconds


@torch.no_grad()
def hf_prefill(model, ids: list[int]) -> None:
    model(input_ids=torch.tensor([ids]), use_cache=True, logits_to_keep=1)


@torch.no_grad()
def hf_decode(model, prompt: list[int], steps: list[int]) -> float:
    cache = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1).past_key_values

    def step(t: int) -> None:
        model(input_ids=torch.tensor([[t]]), past_key_values=cache, use_cache=True)   # DynamicCache grows in place

    return median_step(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=None, help="default: SmolLM2 from tests/assets.py")
    parser.add_argument("--prefill-tokens", type=int, default=512)
    parser.add_argument("--decode-context", type=int, default=256)
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (1 gives stable numbers on a busy machine)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model_dir
    if model_dir is None:
        from tests import assets
        model_dir = assets.smollm2_dir()
    import transformers
    from tests.hf_models import load_hf_model

    eng = Engine.from_pretrained(model_dir)
    hf = load_hf_model(model_dir)
    vocab = eng.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    prefill_ids = torch.randint(0, vocab, (args.prefill_tokens,), generator=gen).tolist()
    prompt = prefill_ids[:args.decode_context]
    steps = torch.randint(0, vocab, (args.decode_steps,), generator=gen).tolist()

    ours_prefill(eng, prefill_ids[:32])  # warm-up both
    hf_prefill(hf, prefill_ids[:32])
    t_ours = t_hf = float("inf")
    d_ours = d_hf = float("inf")
    for _ in range(args.repeats):  # interleaved so that machine noise hits both alike
        t_ours = min(t_ours, best_of(1, lambda: ours_prefill(eng, prefill_ids)))
        t_hf = min(t_hf, best_of(1, lambda: hf_prefill(hf, prefill_ids)))
        d_ours = min(d_ours, ours_decode(eng, prompt, steps))
        d_hf = min(d_hf, hf_decode(hf, prompt, steps))

    bandwidth = read_bandwidth()
    weight_bytes = sum(p.numel() * p.element_size() for p in hf.parameters())
    roofline = weight_bytes / bandwidth
    stats_probe = eng.cache.stats()
    print(f"model: {model_dir.name}  float32  cpu threads={torch.get_num_threads()}  "
          f"transformers {transformers.__version__}  torch {torch.__version__}")
    print(f"prefill {args.prefill_tokens} tokens : ours {args.prefill_tokens / t_ours:8.1f} tok/s   "
          f"transformers {args.prefill_tokens / t_hf:8.1f} tok/s   ratio ours/hf {t_hf / t_ours:5.2f}x")
    print(f"decode step (batch 1, context {args.decode_context}+{args.decode_steps}): ours {d_ours * 1e3:7.2f} ms   "
          f"transformers {d_hf * 1e3:7.2f} ms   ratio ours/hf {d_hf / d_ours:5.2f}x")
    print(f"memory read bandwidth {bandwidth / 1e9:6.2f} GB/s; weights {weight_bytes / 1e6:.1f} MB/step "
          f"-> roofline {roofline * 1e3:6.2f} ms/step; ours at {roofline / d_ours:5.1%}, "
          f"transformers at {roofline / d_hf:5.1%} of the limit")
    print(f"KV cache: {stats_probe.bytes_per_token} bytes/token ({stats_probe.bytes_per_block} per block of "
          f"{stats_probe.block_size}); memory in use = used blocks only ({stats_probe.used_blocks} now)")


if __name__ == "__main__":
    main()
