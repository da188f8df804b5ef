"""Tiny random-weight hybrid models (LFM2, Granite 4, Falcon-H1) built by transformers itself (its torch path, no custom
kernels), with the state dynamics made to matter: conv filters large enough to carry the window, Mamba2 decays
exp(dt * A) spread over ~0.3..0.9 (far from 0 and 1), chunks shorter than the test sequences."""
from __future__ import annotations

import atexit
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

import torch

VOCAB = 97
BASE = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512, initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MAMBA = dict(mamba_n_heads=4, mamba_n_groups=2, mamba_d_state=8, mamba_d_head=16, mamba_expand=2,
             mamba_chunk_size=8, mamba_d_conv=4)
FALCON_MULTIPLIERS = dict(embedding_multiplier=1.7, lm_head_multiplier=0.6, key_multiplier=0.7,
                          attention_in_multiplier=1.3, attention_out_multiplier=0.8, ssm_in_multiplier=1.2,
                          ssm_out_multiplier=0.9, ssm_multipliers=[0.8, 1.2, 1.4, 0.7, 1.3], mlp_multipliers=[1.3, 0.7])

# name -> (transformers config class, model class, overrides)
VARIANTS: dict[str, tuple[str, str, dict]] = {
    "lfm2_conv3_attn1": ("Lfm2Config", "Lfm2ForCausalLM", dict(
        intermediate_size=48, num_hidden_layers=4, layer_types=["conv", "full_attention", "conv", "conv"],
        conv_L_cache=4, block_multiple_of=8, block_ffn_dim_multiplier=1.5)),
    "lfm2_bias_untied_no_adjust": ("Lfm2Config", "Lfm2ForCausalLM", dict(
        intermediate_size=40, num_hidden_layers=3, layer_types=["full_attention", "conv", "conv"], conv_L_cache=3,
        conv_bias=True, tie_word_embeddings=False, block_auto_adjust_ff_dim=False)),
    "granite4_moe_rope": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "mamba"],
        num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=40, position_embedding_type="rope",
        embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=3.0, **MAMBA)),
    "granite4_dense_nope_1group": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=3, layer_types=["mamba", "mamba", "attention"],
        num_local_experts=0, shared_intermediate_size=48, position_embedding_type=None, tie_word_embeddings=True,
        embedding_multiplier=1.5, residual_multiplier=0.7, attention_multiplier=0.25, logits_scaling=2.0,
        **{**MAMBA, "mamba_n_groups": 1, "mamba_chunk_size": 5, "mamba_d_conv": 3})),
    # Falcon-H1: attention and Mamba2 side by side in every layer, every muP multiplier away from 1
    "falcon_h1_norm_before_gate": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=40, num_hidden_layers=3, head_dim=16, **FALCON_MULTIPLIERS,
        **{**MAMBA, "mamba_d_ssm": 48, "mamba_d_head": 12}, mamba_rms_norm=True, mamba_norm_before_gate=True)),
    "falcon_h1_norm_after_gate": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=2, head_dim=8, **FALCON_MULTIPLIERS, **{**MAMBA, "mamba_d_ssm": 64},
        mamba_rms_norm=True, mamba_norm_before_gate=False)),
    "falcon_h1_gate_biases_tied": ("FalconH1Config", "FalconH1ForCausalLM", dict(
        intermediate_size=24, num_hidden_layers=2, tie_word_embeddings=True, attention_bias=True, mlp_bias=True,
        projectors_bias=True, mamba_proj_bias=True, mamba_rms_norm=False, **FALCON_MULTIPLIERS,
        **{**MAMBA, "mamba_d_ssm": None, "mamba_d_head": "auto", "mamba_n_groups": 1, "mamba_chunk_size": 5,
           "mamba_d_conv": 3})),
}

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-hybrids-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def shape_dynamics(name: str, param: torch.Tensor) -> None:
    """Norms near 1, conv taps that matter, Mamba2 decays far from 0 and 1 (dt ~ softplus(dt_bias) ~ 0.3..0.7,
    A = -exp(A_log) ~ -0.4..-1.5: exp(dt A) ~ 0.35..0.9)."""
    if name.endswith("A_log"):
        param.uniform_(math.log(0.4), math.log(1.5))
    elif name.endswith("dt_bias"):
        param.uniform_(-1.0, 0.0)
    elif name.endswith(".D"):
        param.uniform_(0.5, 1.5)
    elif "norm" in name:
        param.uniform_(0.5, 1.5)
    elif "conv" in name and name.endswith("conv.weight") or name.endswith("conv1d.weight"):
        param.normal_(0.0, 0.5)
    elif name.endswith("bias"):
        param.normal_(0.0, 0.1)


SMOLLM2_IDS = dict(vocab_size=49152, bos_token_id=1, eos_token_id=2, pad_token_id=2)


def build(out: Path, variant: str, seed: int = 0, tokenizer_dir: Path | None = None, **overrides) -> Path:
    """The variant saved by transformers into `out`; with `tokenizer_dir` (SmolLM2's: the pinned GGUF converter
    needs a tokenizer it knows) on that vocabulary, its tokenizer files beside it and its pad row not zero (EMB001
    would flag the row nn.Embedding zeroes)."""
    import transformers
    config_cls, model_cls, base = VARIANTS[variant]
    ids = SMOLLM2_IDS if tokenizer_dir is not None else {}
    config = getattr(transformers, config_cls)(**{**BASE, **base, **ids, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape_dynamics(name, param)
        if tokenizer_dir is not None:
            model.get_input_embeddings().weight[ids["pad_token_id"]].normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer_dir is not None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_dir / name, out / name)
    return out


@functools.cache
def hybrid_dir(variant: str) -> Path:
    return build(_ROOT / variant, variant)


@functools.cache
def hf_model(variant: str):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(hybrid_dir(variant), dtype=torch.float32).eval()


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def build_checkable(out: Path, variant: str, seed: int = 0, **overrides) -> Path:
    """The variant with the test factory's tokenizer (its vocabulary and special ids) and generation/tokenizer
    configs beside it: what `llmdoctor check` needs to run every engine check."""
    import transformers
    from reference_engine.testing import factory
    tok = factory.tokenizer_json()
    ids = factory.special_ids(tok)
    config_cls, model_cls, base = VARIANTS[variant]
    fields = {**BASE, **base, **overrides, "vocab_size": factory.tokenizer_length(tok),
              "bos_token_id": ids[factory.BOS], "eos_token_id": ids[factory.IM_END], "pad_token_id": ids[factory.PAD]}
    config = getattr(transformers, config_cls)(**fields)
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape_dynamics(name, param)
        model.get_input_embeddings().weight[fields["pad_token_id"]].normal_(0.0, 0.1)   # nn.Embedding zeroes it
    model.save_pretrained(out, safe_serialization=True)
    raw = {"bos_token_id": fields["bos_token_id"], "eos_token_id": fields["eos_token_id"],
           "pad_token_id": fields["pad_token_id"], "max_position_embeddings": fields["max_position_embeddings"]}
    for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", factory.tokenizer_config(tok, raw)),
                      ("generation_config.json", factory.generation_config(raw))):
        (out / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
