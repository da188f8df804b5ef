"""Decode roofline: is the engine's batch-1 decode bound by memory bandwidth, by compute, or by overhead?

Each batch-1 decode step reads every weight once (plus the KV of the context) and does ~2 FLOPs per
weight. Achieved bandwidth = bytes read per step / median step time; compare it with the bandwidth the
bandwidth probe measured on the same device, and the achieved FLOP/s with a measured matmul rate:
  - >= 60% of measured bandwidth: memory-bandwidth bound (the expected, healthy state: gpt-fast reaches
    ~80% on an A100; the fix is fewer bytes: quantisation, a smaller model, batching);
  - >= 60% of measured matmul FLOP/s: compute bound;
  - neither: overhead bound: kernel launches and Python between them (small models, CPU dispatch).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from findings import Finding
from reference_engine.core.cache.layout import bytes_per_token

from probes.bandwidth import timer

BOUND_FRACTION = 0.6


@dataclass
class RooflineResult:
    model: str
    device: str
    dtype: str
    weight_bytes_per_step: int
    kv_bytes_per_step: int
    flops_per_step: float
    step_times_s: list[float]
    context_tokens: int
    measured_bytes_per_s: float          # from the bandwidth probe on this device
    measured_flops_per_s: float          # from a matmul of the same dtype on this device

    @property
    def step_s(self) -> float:
        return statistics.median(self.step_times_s)

    @property
    def achieved_bytes_per_s(self) -> float:
        return (self.weight_bytes_per_step + self.kv_bytes_per_step) / self.step_s

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops_per_step / self.step_s

    @property
    def bandwidth_fraction(self) -> float:
        return self.achieved_bytes_per_s / self.measured_bytes_per_s

    @property
    def compute_fraction(self) -> float:
        return self.achieved_flops_per_s / self.measured_flops_per_s

    @property
    def verdict(self) -> str:
        if self.bandwidth_fraction >= BOUND_FRACTION:
            return "memory-bandwidth bound"
        if self.compute_fraction >= BOUND_FRACTION:
            return "compute bound"
        return "overhead bound (kernel launch, Python)"


def weights_read_per_step(engine) -> tuple[int, float]:
    """(bytes, FLOPs) of one batch-1 decode step: every matrix is read once; the embedding only one row."""
    w = engine.weights
    matrices = [w.lm_head]
    for layer in w.layers:
        matrices += [layer.qkv, layer.o, layer.gate_up, layer.down]
    vectors = [w.norm] + [t for layer in w.layers for t in (layer.input_norm, layer.post_norm, layer.qkv_bias,
                                                            layer.q_norm, layer.k_norm, layer.o_bias,
                                                            layer.gate_up_bias, layer.down_bias) if t is not None]
    nbytes = sum(t.numel() * t.element_size() for t in matrices + vectors) + w.embed[0].numel() * w.embed.element_size()
    flops = sum(2.0 * t.numel() for t in matrices)
    return nbytes, flops


def kv_bytes_read(engine, context: int) -> int:
    """Bytes of cache a decode step reads at this context: the engine's own layout (MLA: latent + rope key)."""
    return bytes_per_token(engine.cache.layout, engine.cache.k_pools[0].dtype) * context


def measure_matmul_flops(device: torch.device, dtype: torch.dtype, n: int | None = None, runs: int = 5) -> float:
    n = n or (8192 if device.type == "cuda" else 1024)  # big enough that launch time does not dominate
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    clock = timer(device)
    for _ in range(2):
        a @ b
    return 2.0 * n ** 3 / statistics.median(clock(lambda: a @ b) for _ in range(runs))


def run_decode_roofline(model_dir, measured_bytes_per_s: float, device: str = "cpu", dtype: str = "float32",
                        prompt_tokens: int = 32, steps: int = 16) -> RooflineResult:
    from reference_engine.engine import Engine
    engine = Engine.from_pretrained(model_dir, device=device, dtype=dtype)
    return measure_decode(engine, measured_bytes_per_s, str(model_dir), prompt_tokens, steps)


def measure_decode(engine, measured_bytes_per_s: float, model: str = "", prompt_tokens: int = 32,
                   steps: int = 16) -> RooflineResult:
    """Prefill a synthetic prompt, time `steps` batch-1 greedy decode steps (the first two are warm-up)."""
    vocab = engine.config.vocab_size
    prompt = [(i * 7919 + 11) % vocab for i in range(max(1, min(prompt_tokens, engine.rope.max_positions - steps - 1)))]
    clock = timer(engine.device)
    times = []
    with engine.scratch() as (seq,):
        token = int(engine.prefill([seq], [prompt])[0].argmax())
        for _ in range(steps):
            out = {}
            times.append(clock(lambda: out.setdefault("logits", engine.decode([seq], [token]))))
            token = int(out["logits"][0].argmax())
        context = engine.cache.length(seq)
    weight_bytes, flops = weights_read_per_step(engine)
    dtype = str(engine.dtype).replace("torch.", "")
    return RooflineResult(model, str(engine.device), dtype, weight_bytes, kv_bytes_read(engine, context - steps // 2),
                          flops, times[2:] if steps > 4 else times, context, measured_bytes_per_s,
                          measure_matmul_flops(engine.device, engine.dtype))


def roofline_finding(r: RooflineResult) -> Finding:
    plot = {"kind": "bar", "title": f"decode step vs measured ceilings ({r.device}, {r.dtype})",
            "x": ["bandwidth", "compute"],
            "series": {"% of measured ceiling": [round(100 * r.bandwidth_fraction, 2),
                                                 round(100 * r.compute_fraction, 2)]},
            "x_label": "resource", "y_label": "% used by batch-1 decode",
            "hlines": {"bound threshold": 100 * BOUND_FRACTION}}
    evidence = {"model": r.model, "device": r.device, "dtype": r.dtype,
                "weight_bytes_per_step": r.weight_bytes_per_step,
                "kv_bytes_per_step": r.kv_bytes_per_step, "flops_per_step": r.flops_per_step,
                "step_ms_median": round(1e3 * r.step_s, 4), "tokens_per_s": round(1 / r.step_s, 2),
                "achieved_gb_s": round(r.achieved_bytes_per_s / 1e9, 3),
                "measured_gb_s": round(r.measured_bytes_per_s / 1e9, 3),
                "bandwidth_fraction": round(r.bandwidth_fraction, 4),
                "achieved_gflop_s": round(r.achieved_flops_per_s / 1e9, 3),
                "measured_matmul_gflop_s": round(r.measured_flops_per_s / 1e9, 3),
                "compute_fraction": round(r.compute_fraction, 4), "context_tokens": r.context_tokens,
                "steps_timed": len(r.step_times_s), "torch_threads": torch.get_num_threads(), "verdict": r.verdict}
    hint = {"memory-bandwidth bound": "expected for batch-1 decode; fewer bytes per token (quantisation) or "
                                      "batching more sequences per step raise throughput",
            "compute bound": "unusual at batch 1: check the dtype has fast kernels on this device"}.get(
        r.verdict, "the step is dominated by per-kernel overhead: fuse kernels, use CUDA graphs / torch.compile, "
                   "or batch sequences so each weight read serves more tokens")
    return Finding("GPU103", "gpu", "info",
                   f"batch-1 decode on {r.device} ({r.dtype}): {1 / r.step_s:.1f} tok/s, "
                   f"{r.achieved_bytes_per_s / 1e9:.2f} GB/s = {r.bandwidth_fraction:.0%} of measured bandwidth, "
                   f"{r.compute_fraction:.0%} of matmul FLOP/s -> {r.verdict}",
                   evidence=evidence, hint=hint, data={"plot": plot})
