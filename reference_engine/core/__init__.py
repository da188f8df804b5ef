"""Stage 2, the transformer core: token ids -> logits over a paged KV cache.

    engine.py         CoreEngine: prefill / decode / logits over the paged cache; scratch sequences
    model.py          the decoder forward pass (embedding -> layers -> norm), capture hooks between modules
    model_weights.py  tensor names -> typed per-layer weights (fused QKV, gate/up), shape checks
    attention.py      paged scaled-dot-product attention and its per-step metadata
    rope.py           the RoPE table (linear / dynamic / llama3 / yarn scaling)
    linear.py         the decode-time matmul layout (oneDNN packed weights on CPU)
    capture.py        ActivationRecorder: per-layer activation statistics
    cache/            paged KV cache: block allocator, block tables, prefix cache
    families/         one engine module per family, by kind (dense, moe, mla, hybrid): settings and tensor plan
    layers/           what every mixer shares: LayerStep (a mixer's call context), rms() and the RMSNorm forms
    recurrent/        the recurrent mixers (short conv, Mamba2, Gated DeltaNet) and their kernels
    validate.py       validate(core): logits, allocator invariants, RoPE coverage
"""
from reference_engine.core.engine import CoreEngine, resolve_device, resolve_dtype
from reference_engine.core.validate import validate

__all__ = ["CoreEngine", "resolve_device", "resolve_dtype", "validate"]
