"""FP8 with block scales (quant_method "fp8": DeepSeek-V3, Qwen3-FP8; transformers FineGrainedFP8):

    weight            fp8 e4m3 [out, in]
    weight_scale_inv  f32 [ceil(out / bo), ceil(in / bi)]   (weight_block_size [bo, bi]; a scalar without one)

    W = weight * weight_scale_inv over each block (multiplied, despite the name)

Sources: transformers integrations/finegrained_fp8.py (dequantization), DeepSeek-V3 inference/kernel.py
weight_dequant. Static activation scales (activation_scheme "static": input_scale) stay in `.raw`.
"""
from __future__ import annotations

from reference_engine.files.quant.module import QuantModule, decoded
from reference_engine.files.quant.formats import disagree, part, stored_prefixes


def modules(raw, scheme, where):
    """(modules, hidden) for a block-FP8 declaration (declaration.py has checked weight_block_size)."""
    block = scheme.block
    label = f"fp8 block {block[0]}x{block[1]}" if block else "fp8 per-tensor"
    prefixes = [p for p in stored_prefixes(raw, ".weight_scale_inv") if not scheme.excluded(p)]
    hidden = {n for n in raw.names if n.endswith((".input_scale", ".k_scale", ".v_scale"))}
    return [_module(raw, p, block, label) for p in prefixes], hidden


def _module(raw, prefix: str, block, scheme: str) -> QuantModule:
    weight = part(raw, prefix, "weight", ("F8_E4M3",), 2, scheme)
    scale = part(raw, prefix, "weight_scale_inv", ("F32", "BF16", "F16"), (0, 1, 2), scheme)
    out_f, in_f = weight.shape
    if block:
        bo, bi = block
        want = (-(-out_f // bo), -(-in_f // bi))
        if tuple(scale.shape) != want:
            raise disagree(scale, scheme, f"shape {list(scale.shape)}, expected {list(want)} for a "
                                          f"{[out_f, in_f]} weight in {bo}x{bi} blocks")
    elif tuple(scale.shape) not in ((), (1,)):
        raise disagree(scale, scheme, f"shape {list(scale.shape)}: without weight_block_size one scale is expected")

    def dequant(t):
        s = t["weight_scale_inv"].float()
        if block:
            s = s.repeat_interleave(block[0], 0)[:out_f].repeat_interleave(block[1], 1)[:, :in_f]
        return t["weight"].float() * s

    return decoded(prefix, (out_f, in_f), {"weight": weight.name, "weight_scale_inv": scale.name},
                       dequant, scheme)
