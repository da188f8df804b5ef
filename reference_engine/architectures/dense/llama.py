"""Llama, Mistral, Qwen2, Qwen3 (and the Qwen-VL text decoders): what the files say about them."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

LLAMA, MISTRAL, QWEN2, QWEN3 = "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"

DATA = ArchitectureData(
    "llama", (LLAMA, MISTRAL, QWEN2, QWEN3),
    model_types={"llama": LLAMA, "mistral": MISTRAL, "qwen2": QWEN2, "qwen3": QWEN3,
                 # the text decoders of multimodal checkpoints (their `text_config`, or a flat Qwen-VL config)
                 "qwen2_vl": QWEN2, "qwen2_vl_text": QWEN2, "qwen2_5_vl": QWEN2, "qwen2_5_vl_text": QWEN2,
                 "qwen3_vl": QWEN3, "qwen3_vl_text": QWEN3},
    gguf={"llama": GGUFArch(LLAMA, "llama", permute_qk=True),
          "mistral": GGUFArch(MISTRAL, "mistral", permute_qk=True),
          "qwen2": GGUFArch(QWEN2, "qwen2"),
          "qwen3": GGUFArch(QWEN3, "qwen3")},
    biased=(QWEN2,), qk_normed=(QWEN3,))
