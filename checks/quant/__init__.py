"""QNT: quantized safetensors checked from the files. storage.py (QNT001-006: declaration, stored shapes, side
tensors, zero points, g_idx, scales), coverage.py (QNT007-012: which modules are quantized, format-specific
scales, summary) and bias.py (QNT013) share view.py (built once per run): the declaration as the engine reads it
(reference_engine/files/quant/declaration.py), the stored modules as the engine groups them (module.py's
QuantModule), expected.py (which modules the declaration quantizes), layout.py and values.py."""
