"""Phi-3 / Phi-3.5 / Phi-4-mini: what the files say about them (no GGUF mapping: the fused qkv is not undone)."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData

PHI3 = "Phi3ForCausalLM"

DATA = ArchitectureData("phi3", (PHI3,), model_types={"phi3": PHI3})
