"""y = x W^T + b for the projections of decode steps, routed to oneDNN for float32 on CPU.

Why: for the few-row inputs of decode steps, torch's default float32 CPU path (MKL sgemm/sgemv) runs far
below memory bandwidth on some CPUs (measured on a 2-core AMD EPYC: the [1, 576] x [576, 49152] head at
14 GB/s, [4..16, 576] x [576, 49152] at 5-10 GFLOP/s), while oneDNN's JIT kernels reach ~30 GB/s on the
plain weight tensor, and do better still on weights reordered once into oneDNN's blocked layout
(`pack_for_decode`; SmolLM2-135M decode step 47 -> 33 ms at batch 1). bfloat16 gains the same way: its
F.linear path reaches a third of the bandwidth of the packed bf16 weights (measured on a 2-core Intel Xeon
with AVX512-BF16: 25-35% faster at 1 and 16 rows). One exception: on Intel CPUs, MKL's float32 GEMV beats
every oneDNN variant on a single row (same Xeon: 20-30% faster than packed), so a batch-1 float32 step
reads the plain weights with F.linear there (`single_row_plain`). Every other device/dtype (and a torch
without the oneDNN ops) uses F.linear.

Prefill (and so `Engine.logits`) keeps F.linear: it is the kernel transformers runs, so our prompt logits
stay bit-identical to the oracle's; oneDNN sums in another order (~1e-4 apart on SmolLM2's logits, which
is why decode does not promise bit-identity with prefill, only the 1e-4 the tests hold it to).
The packed copy is taken on the engine's first decode step: editing `engine.weights` tensors in place after
that is not seen by decode (assigning a new `engine.weights` is).
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from reference_engine.core.model_weights import ModelWeights


def _onednn_linear_op():
    """torch.ops.mkldnn._linear_pointwise when it exists and agrees with F.linear, else None.

    Runs at import, so its probe tensors come from a private generator: importing the engine must leave torch's
    global random state (and so every seeded caller's draws) exactly as it was."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        op = torch.ops.mkldnn._linear_pointwise
        g = torch.Generator().manual_seed(0)
        x, w, b = (torch.randn(shape, generator=g) for shape in ((3, 8), (5, 8), (5,)))
        if not torch.allclose(op(x, w, b, "none", [], ""), F.linear(x, w, b), atol=1e-5):
            return None
        return op
    except (AttributeError, RuntimeError):
        return None


_ONEDNN = _onednn_linear_op()


def decode_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] -> [..., out]; weight [out, in] (as F.linear)."""
    if weight.is_mkldnn:                                   # packed by pack_for_decode
        return _ONEDNN(x, weight, bias, "none", [], "")
    if (_ONEDNN is not None and x.dtype == torch.float32 and x.device.type == "cpu" and weight.dtype == x.dtype
            and weight.is_contiguous() and not x.requires_grad):
        return _ONEDNN(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _intel_cpu() -> bool:
    """True on an Intel x86 CPU (Linux /proc/cpuinfo): MKL runs its fastest kernels only on Intel's own CPUs."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


_INTEL = _intel_cpu()


def single_row_plain(rows: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a decode step of `rows` rows runs faster on the plain weights with F.linear (MKL's GEMV)."""
    return rows == 1 and _INTEL and dtype == torch.float32 and device.type == "cpu"


PACKABLE = (torch.float32, torch.bfloat16)   # oneDNN's packed kernels beat F.linear for these on CPU
# oneDNN's blocked layout keeps a second copy of the projections (prefill still reads the plain ones), so
# only models whose projections fit this budget get it; larger ones decode from the plain tensors
PACK_LIMIT_BYTES = 1 << 30
PACK_BATCH_HINT = 16    # rows oneDNN tunes the layout for; measured faster than plain for 1..16 rows


def pack_for_decode(weights: ModelWeights) -> ModelWeights:
    """The weights with every projection reordered into oneDNN's blocked layout (~25% faster decode matmuls
    on 4..16 rows, float32 or bfloat16), or `weights` itself where that does not apply (other device/dtype,
    over budget)."""
    projections = [weights.lm_head] + [t for w in weights.layers for t in (w.qkv, w.o, w.gate_up, w.down)
                                       if t is not None]   # a MoE layer has experts instead (left plain)
    size = sum(t.numel() * t.element_size() for t in projections)
    if (_ONEDNN is None or size > PACK_LIMIT_BYTES
            or any(t.dtype not in PACKABLE or t.device.type != "cpu" for t in projections)):
        return weights
    try:
        pack = torch.ops.mkldnn._reorder_linear_weight
        def maybe(t):
            return None if t is None else pack(t, PACK_BATCH_HINT)
        layers = [replace(w, qkv=maybe(w.qkv), o=maybe(w.o), gate_up=maybe(w.gate_up), down=maybe(w.down))
                  for w in weights.layers]
        return replace(weights, layers=layers, lm_head=pack(weights.lm_head, PACK_BATCH_HINT))
    except (AttributeError, RuntimeError):
        return weights
