"""QNT: quantized safetensors checked from the files. storage.py (QNT001-006: declaration, stored shapes, side
tensors, zero points, g_idx, scales) and coverage.py (QNT007-012: which modules are quantized, format-specific
scales, summary) share view.py (built once per run) over scheme.py, grouping.py, layout.py and values.py."""
