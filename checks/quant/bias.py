"""QNT013: the `.bias` tensors AutoGPTQ-era quantizers store beside every quantized linear, against the slots
the architecture has for them (the engine's own tensor table, checks/shared/weights/tensor_layout.py)."""
from __future__ import annotations

from checks.catalogue.inputs import ResourceError
from checks.quant.storage import _listed, at_tensor
from checks.quant.values import read
from checks.quant.view import quantized_view
from checks.catalogue.registry import Problem, Skip, check


@check("QNT013", category="quantization", severity="warning", needs=("config",),
       hint="Fold the bias into the architecture (attention_bias / mlp_bias in config.json, if the model was "
            "trained with it), or re-export without it; all-zero biases are harmless.")
def quantized_module_biases(ctx):
    """A bias stored on a quantized linear that the architecture has no slot for is all zeros.

    AutoGPTQ's QuantLinear registered a bias on every layer (AutoGPTQ#555), so GPTQ uploads of Llama models
    store a zero `.bias` beside each qweight. Loaders read a bias only where the architecture has one
    (Qwen2's q/k/v, a Llama with attention_bias) and skip the others (transformers: unused weights; vLLM:
    "skip loading extra bias for GPTQ models"), as llmdoctor's engine does. All zeros, that is a note; a
    nonzero bias there is part of the quantized model that no loader runs, so its outputs differ from what
    the quantizer measured.
    """
    view = quantized_view(ctx)
    stored = [f"{p}.bias" for p in view.inv.quantized if f"{p}.bias" in view.raw]
    if not stored:
        raise Skip("no quantized module stores a bias")
    try:
        from checks.shared.weights.tensor_layout import expected_tensors
        slots = set(expected_tensors(ctx.config, view.raw.names))
    except (Skip, ResourceError, ValueError, KeyError, TypeError):
        raise Skip("config.json does not describe the architecture's tensors (CFG/WGT checks)") from None
    extra = [n for n in stored if n not in slots]
    nonzero, unread = [], []
    for name in extra:
        t = read(view.raw, name)
        if t is None or not t.is_floating_point():
            unread.append(name)
        elif bool(t.float().ne(0).any()):
            nonzero.append((name, float(t.float().abs().max())))
    if nonzero:
        names = [n for n, _ in nonzero]
        yield Problem(f"{len(nonzero)} quantized modules store a nonzero bias the architecture has no slot for "
                      f"({_listed(names)}; largest |b| {max(b for _, b in nonzero):.3g}): every loader skips it",
                      evidence={"tensors": names[:50], "max_abs": [b for _, b in nonzero][:50]},
                      location=at_tensor(view.raw, names[0]))
    zeros = len(extra) - len(nonzero) - len(unread)
    if zeros:
        yield Problem(f"{zeros} quantized modules store an all-zero bias the architecture has no slot for "
                      f"(AutoGPTQ's QuantLinear wrote one on every layer): loaders skip them", severity="info",
                      evidence={"count": zeros, "applied": len(stored) - len(extra)})
