"""Quantized safetensors checkpoints (GPTQ, AWQ, compressed-tensors, block FP8, bitsandbytes 4-bit) as a
tensor table of dequantized float32 weights: table.QuantizedWeights; one module per format; declaration.py
the one quantization_config reader and module.py the one QuantModule (both shared with the QNT checks)."""
from reference_engine.files.quant.module import QuantModule  # noqa: F401
from reference_engine.files.quant.table import QuantizedWeights  # noqa: F401
