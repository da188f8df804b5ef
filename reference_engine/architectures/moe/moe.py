"""Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE: what the files say about them (no GGUF mapping yet)."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData

MIXTRAL, QWEN2_MOE, QWEN3_MOE, OLMOE = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                                        "OlmoeForCausalLM")

DATA = ArchitectureData(
    "moe", (MIXTRAL, QWEN2_MOE, QWEN3_MOE, OLMOE),
    model_types={"mixtral": MIXTRAL, "qwen2_moe": QWEN2_MOE, "qwen3_moe": QWEN3_MOE, "olmoe": OLMOE})
