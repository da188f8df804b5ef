"""SmolLM3: Llama with NoPE layers, what the files say about it."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

SMOLLM3 = "SmolLM3ForCausalLM"

DATA = ArchitectureData(
    "smollm3", (SMOLLM3,), model_types={"smollm3": SMOLLM3},
    # NoPE layers are not in the GGUF metadata; llama.cpp hard-codes one in 4, the engine's default without
    # no_rope_layers
    gguf={"smollm3": GGUFArch(SMOLLM3, "smollm3", permute_qk=True)},
    nope_layers=True, layer_kinds={SMOLLM3: ("full_attention", "sliding_attention")})
