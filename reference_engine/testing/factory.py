"""Tiny but complete Hugging Face style model directories, written with the engine's own code only.

`build_model_dir(out, "qwen3", seed=1, tie_word_embeddings=True)` writes config.json, generation_config.json,
model.safetensors (HF tensor names, random normal weights, deterministic by seed), tokenizer.json (a byte-level
BPE trained by train_bpe on a small built-in English corpus), tokenizer_config.json with a ChatML chat template
and special_tokens_map.json. transformers loads these directories, so tests compare the engine against it.
"""
from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path

import torch
from safetensors.torch import save_file

from reference_engine.testing.train_bpe import LLAMA3_PATTERN, train_bpe

BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, IM_START, IM_END)
TOKENIZER_VOCAB = 512
# the tokenizer adds BOS (post-processor), so the template must not write it too (TOK007)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, hidden_act="silu", max_position_embeddings=256, rms_norm_eps=1e-5,
               rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=False, initializer_range=0.02,
               use_cache=True, torch_dtype="float32")
PRESETS = {
    "llama": dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, mlp_bias=False),
    "mistral": dict(architectures=["MistralForCausalLM"], model_type="mistral", num_key_value_heads=1,
                    sliding_window=None, head_dim=16, rope_theta=1000000.0),
    "qwen2": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                  sliding_window=None, max_window_layers=2, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen3": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32, attention_bias=False,
                  use_sliding_window=False, sliding_window=None, max_window_layers=2, rope_theta=1000000.0,
                  rms_norm_eps=1e-6),
    # engine families beyond Llama; their tensor tables come from the engine's family plans
    "gemma3": dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", head_dim=32,
                   num_key_value_heads=1, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=32,
                   sliding_window=32, layer_types=["sliding_attention", "full_attention"], rms_norm_eps=1e-6,
                   rope_local_base_freq=10000.0, rope_theta=1000000.0, tie_word_embeddings=True),
    "gemma2": dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=16,
                   hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16, sliding_window=32,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0, tie_word_embeddings=True),
    # Phi-3: fused qkv_proj/gate_up_proj; pass rope_scaling={"type": "longrope", ...} and
    # original_max_position_embeddings for a Phi-3.5/Phi-4-mini style long context
    "phi3": dict(architectures=["Phi3ForCausalLM"], model_type="phi3", sliding_window=None, resid_pdrop=0.0,
                 embd_pdrop=0.0, attention_dropout=0.0, original_max_position_embeddings=256),
    "mixtral": dict(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4,
                    num_experts_per_tok=2, sliding_window=None, rope_theta=1000000.0),
    "qwen2_moe": dict(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=64,
                      norm_topk_prob=False, use_sliding_window=False, rms_norm_eps=1e-6),
    # MLA (core/mla.py) with YaRN (mscale != mscale_all_dim) and DeepSeek-V3's grouped noaux_tc routing
    "deepseek_v3": dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", num_key_value_heads=4,
                        kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                        n_routed_experts=8, n_group=4, topk_group=2, num_experts_per_tok=2, n_shared_experts=1,
                        moe_intermediate_size=32, first_k_dense_replace=1, routed_scaling_factor=2.5,
                        norm_topk_prob=True, rope_interleave=True, rms_norm_eps=1e-6,
                        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                      "mscale": 1.0, "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1}),
    # DeepSeek-V2-Lite's shape: no q LoRA, softmax greedy routing, two shared experts
    "deepseek_v2": dict(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2", num_key_value_heads=4,
                        kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16,
                        v_head_dim=16, n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=2,
                        moe_intermediate_size=32, first_k_dense_replace=1, topk_method="greedy",
                        routed_scaling_factor=1.0, rms_norm_eps=1e-6),
    "glm4_moe": dict(architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", head_dim=16,
                     partial_rotary_factor=0.5, use_qk_norm=True, attention_bias=True, n_routed_experts=8,
                     n_group=2, topk_group=1, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
                     first_k_dense_replace=1, routed_scaling_factor=1.0, norm_topk_prob=True),
    # SmolLM3 (a NoPE layer), OLMo 2/3 (post-norm; OLMo 3 windows), MiniMax-M2, Llama 4 text
    "smollm3": dict(architectures=["SmolLM3ForCausalLM"], model_type="smollm3", no_rope_layers=[1, 0],
                    use_sliding_window=False, sliding_window=None, attention_bias=False, mlp_bias=False),
    "olmo2": dict(architectures=["Olmo2ForCausalLM"], model_type="olmo2", attention_bias=False, rms_norm_eps=1e-6),
    "olmo3": dict(architectures=["Olmo3ForCausalLM"], model_type="olmo3", attention_bias=False, rms_norm_eps=1e-6,
                  sliding_window=32, layer_types=["sliding_attention", "full_attention"]),
    "minimax_m2": dict(architectures=["MiniMaxM2ForCausalLM"], model_type="minimax_m2", head_dim=16, rotary_dim=8,
                       num_local_experts=4, num_experts_per_tok=2, intermediate_size=64),
    "llama4": dict(architectures=["Llama4ForCausalLM"], model_type="llama4_text", head_dim=16, num_local_experts=4,
                   num_experts_per_tok=1, interleave_moe_layer_step=2, intermediate_size=64,
                   intermediate_size_mlp=128, attention_chunk_size=32, no_rope_layers=[1, 0], use_qk_norm=True,
                   attn_temperature_tuning=True, floor_scale=16, attn_scale=0.1),
    # gpt-oss: sinks, alternating 8-token windows, YaRN, clamped SwiGLU experts (dims multiples of 32: MXFP4)
    "gpt_oss": dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", head_dim=16, intermediate_size=64,
                    num_local_experts=4, num_experts_per_tok=2, experts_per_token=2, sliding_window=8,
                    layer_types=["sliding_attention", "full_attention"], attention_bias=True, swiglu_limit=7.0,
                    swiglu_alpha=1.702, rope_theta=150000.0, initializer_range=0.1,
                    rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "truncate": False, "original_max_position_embeddings": 64}),
}
# Gemma stores its norm weights as offsets from 1 (the forward multiplies by 1 + w)
OFFSET_NORMS = ("gemma2", "gemma3_text")

CORPUS = """\
The old lighthouse stood at the end of the long stone pier, and every evening the keeper climbed its
narrow stairs to light the lamp. Ships that passed in the night saw the beam sweep across the water and
knew that the harbour was near. In the morning the keeper walked down to the village to buy bread,
cheese and a newspaper, and the children asked him about the storms he had seen.
"The sea is never the same two days in a row," he told them. "Some days it is as calm as a pond, and
some days the waves are taller than the houses on the hill. You have to watch it, and you have to
listen to it, because it always tells you what it is going to do next."
A small library sat beside the bakery. It had three rooms, a fireplace and a cat that slept on the
window sill. People came to read books about history, science, gardens and faraway countries. The
librarian kept a list of every book that was borrowed and every book that came back, and she wrote the
numbers in a large green ledger: 12 in January, 31 in February, 47 in March and 105 by the summer.
Learning to cook is a little like learning a language. First you learn the words: salt, flour, butter,
water, heat. Then you learn how they fit together, and finally you can say things nobody taught you.
A good recipe is a sentence; a good meal is a story with a beginning, a middle and an end.
Question: What is the capital of France? Answer: The capital of France is Paris.
Question: How many days are in a week? Answer: There are seven days in a week.
Question: What colour is the sky on a clear day? Answer: The sky is blue on a clear day.
The train left the station at half past nine. It crossed the river, passed the farms and the forests,
and arrived in the city before noon. The passengers opened their windows, looked at the tall buildings
and the busy streets, and wondered what the day would bring.
"""


@lru_cache(maxsize=4)
def _trained_tokenizer(vocab_size: int) -> str:
    """tokenizer.json text, trained once per process and vocabulary size."""
    tok = train_bpe([CORPUS], vocab_size, SPECIAL_TOKENS, pattern=LLAMA3_PATTERN, bos_token=BOS)
    return json.dumps(tok, ensure_ascii=False, indent=2)


def tokenizer_json(vocab_size: int = TOKENIZER_VOCAB) -> dict:
    return json.loads(_trained_tokenizer(vocab_size))


def special_ids(tokenizer: dict) -> dict[str, int]:
    return {t["content"]: t["id"] for t in tokenizer["added_tokens"]}


def tokenizer_length(tokenizer: dict) -> int:
    ids = list(tokenizer["model"]["vocab"].values()) + [t["id"] for t in tokenizer["added_tokens"]]
    return max(ids) + 1


def model_config(preset: str, tokenizer: dict, overrides: dict) -> dict:
    """config.json content: common defaults, then the preset, then the caller's overrides."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    ids = special_ids(tokenizer)
    config = {**copy.deepcopy(_COMMON), **copy.deepcopy(PRESETS[preset])}
    config.update(vocab_size=tokenizer_length(tokenizer), bos_token_id=ids[BOS], eos_token_id=ids[IM_END],
                  pad_token_id=ids[PAD])
    config.update(overrides)
    return config


def weight_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape for a Llama-family decoder described by config (other families: the engine's
    own table for the architecture)."""
    if config["model_type"] not in ("llama", "mistral", "qwen2", "qwen3"):
        from reference_engine.config import parse_config
        from reference_engine.core.model_weights import expected_shapes
        return expected_shapes(parse_config(config))
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    qkv_bias = config["model_type"] == "qwen2" or config.get("attention_bias", False)
    o_bias = config["model_type"] != "qwen2" and config.get("attention_bias", False)
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (hidden,)
        q_rows, kv_rows = heads * head_dim, kv_heads * head_dim
        for proj, rows in (("q_proj", q_rows), ("k_proj", kv_rows), ("v_proj", kv_rows)):
            shapes[p + f"self_attn.{proj}.weight"] = (rows, hidden)
            if qkv_bias:
                shapes[p + f"self_attn.{proj}.bias"] = (rows,)
        shapes[p + "self_attn.o_proj.weight"] = (hidden, heads * head_dim)
        if o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (hidden,)
        if config["model_type"] == "qwen3":
            shapes[p + "self_attn.q_norm.weight"] = (head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, hidden)  # tied models store only the embedding, as HF does
    return shapes


def random_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Normal(0, initializer_range) matrices and biases; norm gains near 1 (not exactly 1, so a test
    notices when a norm weight is ignored). Deterministic: same config and seed, same bytes."""
    gen = torch.Generator().manual_seed(seed)
    std = config.get("initializer_range", 0.02)
    from reference_engine.core.engine import DTYPES
    dtype = DTYPES[config.get("torch_dtype") or "float32"]
    out = {}
    for name, shape in weight_shapes(config).items():
        if name.endswith("norm.weight"):
            offsets = config["model_type"] in OFFSET_NORMS      # transformers initialises them to zeros
            t = (0.02 if offsets else 1.0) + (0.03 if offsets else 0.1) * torch.randn(shape, generator=gen)
        else:
            t = std * torch.randn(shape, generator=gen)
        out[name] = t.to(dtype).contiguous()
    return out


def build_model_dir(out_dir: str | Path, preset: str = "llama", *, seed: int = 0, shards: int = 1,
                    tokenizer_vocab: int = TOKENIZER_VOCAB, **config_overrides) -> Path:
    """Write a tiny complete model directory and return its path.

    config_overrides go into config.json (e.g. num_hidden_layers=3, tie_word_embeddings=True,
    rope_scaling={...}, head_dim=8, torch_dtype="bfloat16" which also sets the stored dtype);
    shards > 1 splits the weights into model-0000i-of-0000n.safetensors plus an index."""
    tokenizer = tokenizer_json(tokenizer_vocab)
    config = model_config(preset, tokenizer, config_overrides)
    return write_model_dir(out_dir, config, tokenizer, random_weights(config, seed), shards)


def write_model_dir(out_dir: str | Path, config: dict, tokenizer: dict, weights: dict[str, torch.Tensor],
                    shards: int = 1) -> Path:
    """Write config, weights, tokenizer and the derived generation/tokenizer configs into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_weights(out, weights, shards)
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", generation_config(config))
    _write_json(out / "tokenizer.json", tokenizer)
    _write_json(out / "tokenizer_config.json", tokenizer_config(tokenizer, config))
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": IM_END, "pad_token": PAD})
    return out


def add_tokenizer(model_dir: str | Path, tokenizer_vocab: int = TOKENIZER_VOCAB) -> dict:
    """Give a model directory built elsewhere (by transformers, in the family tests) the factory's trained
    tokenizer and the configs derived from it, so `llmdoctor check` runs its tokenizer and engine checks on it.
    The model's vocab_size must equal the tokenizer's length (see `special_ids` for bos/eos/pad). Returns the
    special ids."""
    out = Path(model_dir)
    tokenizer = tokenizer_json(tokenizer_vocab)
    ids = special_ids(tokenizer)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config.setdefault("max_position_embeddings",
                      (config.get("text_config") or {}).get("max_position_embeddings", 2048))
    special = dict(bos_token_id=ids[BOS], eos_token_id=ids[IM_END], pad_token_id=ids[PAD])
    config.update(special)
    if isinstance(config.get("text_config"), dict):
        config["text_config"].update(special)
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json", generation_config(config))
    _write_json(out / "tokenizer.json", tokenizer)
    _write_json(out / "tokenizer_config.json", tokenizer_config(tokenizer, config))
    _write_json(out / "special_tokens_map.json", {"bos_token": BOS, "eos_token": IM_END, "pad_token": PAD})
    return ids


def write_weights(out: Path, weights: dict[str, torch.Tensor], shards: int = 1) -> None:
    if shards <= 1:
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(weights)
    per_shard = -(-len(names) // shards)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        chunk = {n: weights[n] for n in names[i * per_shard:(i + 1) * per_shard]}
        save_file(chunk, str(out / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in chunk})
    total = sum(t.numel() * t.element_size() for t in weights.values())
    _write_json(out / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def generation_config(config: dict) -> dict:
    return {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
            "pad_token_id": config["pad_token_id"], "do_sample": False, "max_new_tokens": 32}


def tokenizer_config(tokenizer: dict, config: dict) -> dict:
    decoder = {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word",
                                                  "special")} for t in tokenizer["added_tokens"]}
    return {"added_tokens_decoder": decoder, "bos_token": BOS, "eos_token": IM_END, "pad_token": PAD,
            "unk_token": None, "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
            "model_max_length": config["max_position_embeddings"], "tokenizer_class": "PreTrainedTokenizerFast"}


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
