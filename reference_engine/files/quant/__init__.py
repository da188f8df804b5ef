"""Quantized safetensors checkpoints (GPTQ, AWQ, compressed-tensors, block FP8, bitsandbytes 4-bit) as a
tensor table of dequantized float32 weights: table.QuantizedWeights; one module per format."""
from reference_engine.files.quant.formats import QuantModule  # noqa: F401
from reference_engine.files.quant.table import QuantizedWeights  # noqa: F401
