"""Tiny random-weight gpt-oss models built by transformers (the oracle), with weights scaled so that every
gpt-oss detail changes the logits: large sinks, a window shorter than the prompts, YaRN with positions past
original_max_position_embeddings, router logits spread enough that tokens pick different experts, and
gate/up activations well past `swiglu_limit` so the clamp bites. MXFP4 copies store the experts as the
released checkpoints do (`*_blocks` + `*_scales`)."""
from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

VOCAB = 97
CONFIG = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=6, num_experts_per_tok=2, sliding_window=8,
              max_position_embeddings=256, swiglu_limit=1.5, initializer_range=0.1, pad_token_id=0,
              bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-5,
              rope_parameters={"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0,
                               "truncate": False, "original_max_position_embeddings": 32, "rope_theta": 150000.0})
EXPERTS = ("gate_up_proj", "down_proj")
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-gptoss-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def build(out: Path, seed: int = 0, **overrides) -> Path:
    import transformers
    config = transformers.GptOssConfig(**{**CONFIG, **overrides})
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("sinks"):
                param.uniform_(-1.0, 3.0)           # large: the sink takes a real share of each softmax
            elif "router" in name:
                param.normal_(0.0, 0.5)             # spread logits: tokens pick different experts
            elif "experts" in name:
                param.normal_(0.0, 0.3)             # gate/up past swiglu_limit for many tokens
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    return out


@functools.cache
def gpt_oss_dir(seed: int = 0) -> Path:
    return build(_ROOT / f"bf32-{seed}", seed)


def load_hf(path: Path):
    """transformers' eager path: eager attention (the sinks) and the eager expert loop."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.set_experts_implementation("eager")
    return model.eval()


@functools.cache
def hf_model(seed: int = 0):
    return load_hf(gpt_oss_dir(seed))


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [..., out, in] (in a multiple of 32) -> (blocks uint8 [..., out, in / 32, 16], scales uint8
    [..., out, in / 32]): round to nearest on the e2m1 grid with a power-of-two scale per 32 values (the
    OCP MX layout: low nibble first, exponent biased by 127)."""
    groups = w.float().reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = groups.abs().amax(-1, keepdim=True).clamp(min=2.0 ** -100)
    exp = torch.ceil(torch.log2(amax / 6.0))                              # the largest value fits under 6
    grid = torch.tensor(FP4_VALUES)
    scaled = groups / torch.exp2(exp)
    codes = (scaled.abs()[..., None] - grid).abs().argmin(-1)             # [..., 32] magnitude index 0..7
    codes = codes | ((scaled < 0) & (codes > 0)).long() << 3              # sign bit (no negative zero)
    packed = (codes[..., 0::2] | codes[..., 1::2] << 4).to(torch.uint8)  # [..., 16]
    return packed, (exp[..., 0] + 127).to(torch.uint8)


def mxfp4_copy(src: Path, out: Path, keep_float: tuple[str, ...] = ()) -> Path:
    """src's experts stored as MXFP4 (transformers' [experts, in, out] transposed to [experts, out, in] first,
    as the released checkpoints store them), config.json declaring quant_method mxfp4."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(src / "model.safetensors")
    stored = {}
    for name, t in tensors.items():
        base = name.rsplit(".", 1)[-1]
        if base in EXPERTS and not any(k in name for k in keep_float):
            stored[name + "_blocks"], stored[name + "_scales"] = quantize_mxfp4(t.transpose(1, 2).contiguous())
        else:
            stored[name] = t
    save_file(stored, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for extra in src.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            shutil.copy(extra, out / extra.name)
    return out


@functools.cache
def mxfp4_dir(seed: int = 0) -> Path:
    return mxfp4_copy(gpt_oss_dir(seed), _ROOT / f"mxfp4-{seed}")


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
