"""quantization_config.quant_method -> the format module that reads its tensors.

The declaration is read once by declaration.py (the reader the QNT checks use too); its first problem is
the load's one-line error. Each format module has `modules(raw, scheme, where) -> (modules, hidden)`: the
logical weights it dequantizes (formats.QuantModule) and stored tensors the engine does not use (activation
and KV-cache scales, per-module metadata read once), which stay readable through `.raw` but are not part
of the table.
"""
from __future__ import annotations

from pathlib import Path

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.quant.declaration import METHODS, read_declaration
from reference_engine.files.quant.scheme import INVALID
from reference_engine.files.weights import Weights

SUPPORTED = METHODS


def format_modules(raw: Weights, qconfig: dict, where: Path):
    scheme, problems = read_declaration(qconfig)
    if problems:
        first = problems[0]
        raise (ModelDirError if first.kind == INVALID else UnsupportedError)(where, first.message)
    if scheme.method == "gptq":
        from reference_engine.files.quant import gptq as fmt
    elif scheme.method == "awq":
        from reference_engine.files.quant import awq as fmt
    elif scheme.method == "compressed-tensors":
        from reference_engine.files.quant import compressed_tensors as fmt
    elif scheme.method == "fp8":
        from reference_engine.files.quant import fp8 as fmt
    elif scheme.method == "mxfp4":
        from reference_engine.files.quant import mxfp4 as fmt
    else:
        from reference_engine.files.quant import bnb as fmt
    modules, hidden = fmt.modules(raw, scheme, where)
    return scheme.method, {m.name: m for m in modules}, hidden
