"""The engine fault zoo: named ways to break a healthy factory model so that an engine-backed check (golden,
activations, kv_cache, numerics, generation, drift) must catch it. Same shape as tests/checks/zoo.py:
ENGINE_FAULTS is the one table of (fault, expected check id, expected severity, bug anchor, base model).

`baseline=True` faults are judged against a golden baseline recorded on the healthy base first (drift)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tests.checks.conftest import STATIC_CATEGORIES
from tests.checks.zoo import DELETE, EMBED, LM_HEAD, Fault, edit_json, edit_tensors, one_value, read_json

ENGINE_CATEGORIES = ["golden", "activations", "kv_cache", "numerics", "generation", "selftest"]
# a family's check run: the static and engine checks and the competence family (measured, not judged, on tiny models)
FAMILY_RUN = [*STATIC_CATEGORIES, *ENGINE_CATEGORIES, "competence"]
# base model directories: name -> factory_model_dir(preset, **overrides) arguments
ENGINE_BASES = {
    "llama": ("llama", {}),
    "deep": ("llama", {"num_hidden_layers": 4}),
    # trained on 64 positions, extended to 256 by linear RoPE scaling (Phi-3 style: the trained context is
    # also written at the top level, which is what survives when rope_scaling is dropped)
    "rope_scaled": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 4.0},
                              "original_max_position_embeddings": 64}),
    # not a factory model: the trained demo model shipped with llmdoctor (llmdoctor/demo_model)
    "demo": (None, {}),
    # mixture of experts: top-1 routing over 3 experts, so a router fault has a deterministic effect
    "moe_top1": ("mixtral", {"num_local_experts": 3, "num_experts_per_tok": 1}),
    "mixtral": ("mixtral", {}),             # the factory's Mixtral: 4 experts, top-2
    "gemma3": ("gemma3", {}),               # random weights: norm weights are offsets near 0
}
ROUTER = "model.layers.{}.block_sparse_moe.gate.weight"


def router_edit(layer: int, edit):
    """Replace one layer's router matrix [experts, hidden] by edit(router)."""
    def change(t: dict, d: Path) -> None:
        t[ROUTER.format(layer)] = edit(t[ROUTER.format(layer)].clone()).contiguous()
    return edit_tensors(change)


def average_rows(w: torch.Tensor) -> torch.Tensor:
    """Router row 2 := mean of rows 0 and 1: its logit never exceeds both, so top-1 never picks expert 2."""
    w[2] = (w[0] + w[1]) / 2
    return w


def zero_row(w: torch.Tensor) -> torch.Tensor:
    """Router row 2 := 0: expert 2's logit is 0 for every token (it still wins where its siblings' fall below)."""
    w[2] = 0.0
    return w


def nan_row(w: torch.Tensor) -> torch.Tensor:
    w[1, 0] = float("nan")
    return w


def shift_norms(shift: float):
    """Every RMSNorm weight + shift: -1 stores Gemma-style offsets under a Llama architecture, +1 stores full
    gains (1 + w) under Gemma's."""
    def change(t: dict, _: Path) -> None:
        for name in t:
            if name.endswith("norm.weight"):
                t[name] = t[name] + shift
    return edit_tensors(change)


norms_as_offsets = shift_norms(-1.0)


@dataclass(frozen=True)
class EngineFault(Fault):
    baseline: bool = False     # record a baseline on the healthy base and check the copy against it
    evidence: dict | None = None   # evidence keys the finding must carry, e.g. the layer bisection names


def scale_mlp(layer: int, factor: float):
    """Scale one layer's gate/up/down projections: weights stay small, the MLP output grows by factor**3."""
    def change(t: dict, d: Path) -> None:
        for proj in ("gate_proj", "up_proj", "down_proj"):
            name = f"model.layers.{layer}.mlp.{proj}.weight"
            t[name] = t[name] * factor
    return edit_tensors(change)


def perturb(name: str, relative: float, seed: int = 3):
    """Add Gaussian noise of `relative` times the tensor's std (a botched conversion / quantization)."""
    def change(t: dict, d: Path) -> None:
        gen = torch.Generator().manual_seed(seed)
        t[name] = t[name] + relative * t[name].std() * torch.randn(t[name].shape, generator=gen)
    return edit_tensors(change)


def every_id_is_eos(d: Path) -> None:
    """generation_config.json lists every token id as EOS: the first generated token always ends the answer.
    The weights are untouched, so on a factory model (still at its initialisation) GEN001 stays info."""
    vocab = read_json(d, "config.json")["vocab_size"]
    edit_json("generation_config.json", eos_token_id=list(range(vocab)))(d)


def eos_row_flipped(d: Path) -> None:
    """Every EOS row of the output matrix (the embedding when tied) times -1000: a dequantization scale with
    the wrong sign and size. EOS wins every step and the probe loss goes far past uniform."""
    gen = read_json(d, "generation_config.json").get("eos_token_id")
    eos = gen if isinstance(gen, list) else [gen]

    def change(t: dict, _: Path) -> None:
        name = LM_HEAD if LM_HEAD in t else EMBED
        t[name] = t[name].clone()
        for e in eos:
            t[name][e] *= -1000.0
    edit_tensors(change)(d)


# roles written after a run of pad tokens: the seed's outage where <|user|> ended up behind the padding
TEMPLATE_PADS_BEFORE_ROLES = (
    "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}<|pad|><|pad|><|pad|>"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

ENGINE_FAULTS: list[EngineFault] = [
    EngineFault("nan_in_layer2_mlp", one_value("model.layers.2.mlp.down_proj.weight", float("nan")), "GLD002",
                "error", "vllm#14126", base="deep",
                evidence={"first_bad": {"layer": 2, "module": "mlp", "submodule": "mlp"}}),
    EngineFault("fp16_overflow_layer1", scale_mlp(1, 300.0), "NUM001", "warning",
                "onnxruntime-genai PR#2444", evidence={"float32_peak_at": {"layer": 1}}),
    EngineFault("rope_scaling_removed", edit_json("config.json", rope_scaling=DELETE), "KVC003", "warning",
                "unsloth PR#6197", base="rope_scaled"),
    EngineFault("right_padding", edit_json("tokenizer_config.json", padding_side="right"), "GLD001", "warning",
                "transformers#25790"),
    EngineFault("template_pads_before_roles", edit_json("tokenizer_config.json",
                                                        chat_template=TEMPLATE_PADS_BEFORE_ROLES),
                "GLD001", "error", "seed: <|user|> padded to the end"),
    EngineFault("eos_always_first_untrained", every_id_is_eos, "GEN001", "info",
                evidence={"weights_at_initialisation": True}),
    # trained weights broken so that the loss goes past uniform: the severity must stay: a
    # check must not read its own fault as "untrained weights" and go quiet
    EngineFault("eos_always_first_trained", eos_row_flipped, "GEN001", "warning",
                "broken weights must not downgrade their own finding", base="demo",
                evidence={"weights_at_initialisation": False}),
    EngineFault("weights_perturbed", perturb(LM_HEAD, 0.5), "DRF001", "error", "conversion drift", baseline=True),
    EngineFault("layer_scaled_std_jump", scale_mlp(1, 300.0), "ACT003", "warning", base="deep"),
    # mixture of experts and conversions
    EngineFault("moe_router_nan", router_edit(0, nan_row), "MOE003", "error", base="moe_top1"),
    EngineFault("moe_router_zeroed", router_edit(1, torch.zeros_like), "MOE005", "warning",
                "router left at its zero initialisation", base="moe_top1"),
    EngineFault("moe_dead_expert", router_edit(0, average_rows), "MOE004", "warning", base="moe_top1"),
    EngineFault("moe_router_row_zeroed", router_edit(0, zero_row), "MOE004", "warning",
                "one expert's router row lost in conversion", base="mixtral"),
    EngineFault("norm_gains_saved_as_offsets", norms_as_offsets, "CNV001", "error",
                "Gemma (1 + w) norm convention applied to the wrong architecture", base="demo"),
    # untrained weights: the probes cannot tell the conventions apart, the initial values can
    EngineFault("untrained_norm_gains_saved_as_offsets", norms_as_offsets, "CNV001", "error",
                evidence={"weights_at_initialisation": True}),
    EngineFault("untrained_gemma3_norms_saved_as_gains", shift_norms(1.0), "CNV001", "error",
                "Gemma 3 norms written as 1 + w", base="gemma3", evidence={"weights_at_initialisation": True}),
]
