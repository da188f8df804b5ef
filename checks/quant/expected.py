"""Which modules the declaration says are stored quantized, against the stored inventory (the engine's
files/quant/module.py groups the names by module: the one QuantModule, shared with the engine's table)."""
from __future__ import annotations

from reference_engine.files.quant.scheme import QuantScheme


def lm_head_expected_quantized(scheme: QuantScheme, prefix: str = "lm_head") -> bool:
    """Whether the scheme quantizes the output projection: only GPTQ's lm_head=true and a compressed-tensors
    group targeting it without an ignore entry do; AWQ, fp8 and bitsandbytes keep it in float."""
    if scheme.method == "gptq":
        return scheme.lm_head and not scheme.excluded(prefix)
    if scheme.method == "compressed-tensors":
        return scheme.targeted(prefix) and not scheme.excluded(prefix)
    return False


def expected_quantized(scheme: QuantScheme, prefix: str) -> bool:
    """Whether the config says this linear layer is stored quantized."""
    if prefix.split(".")[-1] == "lm_head":
        return lm_head_expected_quantized(scheme, prefix)
    return scheme.targeted(prefix) and not scheme.excluded(prefix)
