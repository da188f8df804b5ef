"""quantization_config.quant_method -> the format module that reads its tensors.

Each format module has `modules(raw, qconfig, where) -> (modules, hidden)`: the logical weights it
dequantizes (formats.QuantModule) and stored tensors the engine does not use (activation and KV-cache
scales, per-module metadata read once), which stay readable through `.raw` but are not part of the table.
"""
from __future__ import annotations

from pathlib import Path

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.weights import Weights

SUPPORTED = ("gptq", "awq", "compressed-tensors", "fp8", "bitsandbytes")


def format_modules(raw: Weights, qconfig: dict, where: Path):
    if not isinstance(qconfig, dict):
        raise ModelDirError(where, f"quantization_config must be an object, found {type(qconfig).__name__}")
    method = qconfig.get("quant_method")
    if method == "gptq":
        from reference_engine.files.quant import gptq as fmt
    elif method == "awq":
        from reference_engine.files.quant import awq as fmt
    elif method == "compressed-tensors":
        from reference_engine.files.quant import compressed_tensors as fmt
    elif method == "fp8":
        from reference_engine.files.quant import fp8 as fmt
    elif method == "bitsandbytes":
        from reference_engine.files.quant import bnb as fmt
    else:
        raise UnsupportedError(where, f"quantization_config.quant_method {method!r} is not supported "
                                      f"(supported: {', '.join(SUPPORTED)})")
    modules, hidden = fmt.modules(raw, qconfig, where)
    return method, {m.name: m for m in modules}, hidden
