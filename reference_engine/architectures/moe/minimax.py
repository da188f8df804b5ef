"""MiniMax-M2: what the files say about it."""
from __future__ import annotations

from reference_engine.architectures.base import ArchitectureData, GGUFArch

MINIMAX_M2 = "MiniMaxM2ForCausalLM"

DATA = ArchitectureData(
    "minimax", (MINIMAX_M2,), model_types={"minimax_m2": MINIMAX_M2},
    # experts stored stacked, one [experts, rows, cols] tensor per role
    gguf={"minimax-m2": GGUFArch(
        MINIMAX_M2, "minimax_m2", layer_names={"ffn_gate_inp": "block_sparse_moe.gate"},
        tensor_names={"exp_probs_b.bias": "block_sparse_moe.e_score_correction_bias"},
        experts={"ffn_gate_exps": "block_sparse_moe.experts.{e}.w1.weight",
                 "ffn_up_exps": "block_sparse_moe.experts.{e}.w3.weight",
                 "ffn_down_exps": "block_sparse_moe.experts.{e}.w2.weight"},
        config_keys={"expert_count": "num_local_experts", "expert_used_count": "num_experts_per_tok",
                     "expert_feed_forward_length": "intermediate_size", "rope.dimension_count": "rotary_dim"},
        partial_rotary=True)})        # rotary_dim 64 of head_dim 128 in the released model
