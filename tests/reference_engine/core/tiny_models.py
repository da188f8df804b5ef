"""The one builder of the core tests' tiny random-weight models: transformers (the oracle) builds the variant from
its kind's base config (tests/reference_engine/core/tiny_families.py), its weights are drawn so that every feature
bites (transformers initialises norms to 1 and biases to 0, which would hide a norm or bias bug), and it is saved
with `save_pretrained` and cached per test session. The Llama/Mistral/Qwen variants of tests/hf_models.py are
built by that module's builder (other test folders share it) and cached here the same way.

The first test of a session that builds one pays transformers' import and the first build (10-20 s on 2 busy
cores); each later one takes about a second."""
from __future__ import annotations

import atexit
import functools
import json
import math
import shutil
import tempfile
from pathlib import Path

import torch

from tests.hf_models import VARIANTS as LLAMA_LIKE
from tests.hf_models import build_hf_model, load_hf_model
from tests.reference_engine.core.tiny_families import KINDS, VOCAB, Kind

_ROOT = Path(tempfile.mkdtemp(prefix="llmdoctor-tiny-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def kind_of(variant: str) -> Kind:
    found = [kind for kind in KINDS if variant in kind.variants]
    if len(found) != 1:
        raise KeyError(f"tiny model variant {variant!r} is in {len(found)} kinds of tiny_families.py, not one")
    return found[0]


# each draw rule: (parameter name, parameter, config) -> None, in place; the rules differ in what they scale
def draw_plain(name: str, param: torch.Tensor, config) -> None:
    """Norms near 1 (Gemma stores them as offsets from 1: near 0), biases N(0, 0.1)."""
    if "norm" in name:
        param.uniform_(-0.5, 0.5) if type(config).__name__.startswith("Gemma") else param.uniform_(0.5, 1.5)
    elif name.endswith("bias"):
        param.normal_(0.0, 0.1)


def draw_routed(name: str, param: torch.Tensor, config) -> None:
    """As plain, and experts and routers N(0, 0.3): routers whose choice differs from token to token."""
    if "norm" in name:
        param.uniform_(0.5, 1.5)
    elif name.endswith("bias"):
        param.normal_(0.0, 0.1)
    elif "experts" in name or "router" in name or name.endswith("gate.weight"):
        param.normal_(0.0, 0.3)


def draw_state(name: str, param: torch.Tensor, config) -> None:
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


def draw_delta_net(name: str, param: torch.Tensor, config) -> None:
    """Decays exp(g) over ~0.3..0.95 (A_log, dt_bias), zero-centred norms around 0, the gated norm around 1."""
    if name.endswith("linear_attn.norm.weight"):         # gated norm: a plain weight
        param.uniform_(0.5, 1.5)
    elif "norm" in name:                                 # zero-centred: (1 + w)
        param.uniform_(-0.5, 0.5)
    elif name.endswith("A_log"):                         # exp(A_log) in 0.1..1
        param.copy_(torch.empty_like(param).uniform_(math.log(0.1), 0.0))
    elif name.endswith("dt_bias"):
        param.uniform_(-0.5, 0.5)
    elif name.endswith("conv1d.weight"):
        param.normal_(0.0, 0.4)
    elif name.endswith("embed_tokens.weight"):          # the pad row too (nn.Embedding zeroes it)
        param.normal_(0.0, 0.1)


def draw_sinks(name: str, param: torch.Tensor, config) -> None:
    """gpt-oss: large sinks, spread router logits, gate/up past swiglu_limit for many tokens."""
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


# draw rule name -> (parameter rule, std of e_score_correction_bias: big enough to change which experts win)
DRAWS = {"plain": (draw_plain, 0.1), "routed": (draw_routed, 0.3), "state": (draw_state, None),
         "delta_net": (draw_delta_net, None), "sinks": (draw_sinks, None)}


def factory_ids() -> dict:
    """The config ids of the test factory's trained tokenizer (its vocabulary and special tokens)."""
    from reference_engine.testing import factory
    tok = factory.tokenizer_json()
    ids = factory.special_ids(tok)
    return dict(vocab_size=factory.tokenizer_length(tok), bos_token_id=ids[factory.BOS],
                eos_token_id=ids[factory.IM_END], pad_token_id=ids[factory.PAD])


def tokenizer_ids(kind: Kind, tokenizer_dir: Path) -> dict:
    vocab = len(json.loads((tokenizer_dir / "tokenizer.json").read_text())["model"]["vocab"])
    return {"vocab_size": vocab, **kind.tokenizer_ids}


def build(out: Path, variant: str, seed: int = 0, tokenizer_dir: Path | None = None, **overrides) -> Path:
    """Save transformers' model of `variant` (its kind's base, the variant's overrides, then `overrides`) into
    `out`, weights drawn by the kind's rule after seeding torch with `seed`. With `tokenizer_dir` (a tokenizer
    llama.cpp's converter knows, for GGUF export) the model sits on that vocabulary and its tokenizer files beside
    it."""
    if variant in LLAMA_LIKE:
        return build_hf_model(out, variant, seed, **overrides)
    if tokenizer_dir is None:
        return save(out, variant, seed, {}, overrides, on_tokenizer=False)
    save(out, variant, seed, tokenizer_ids(kind_of(variant), tokenizer_dir), overrides, on_tokenizer=True)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, out / name)
    return out


def save(out: Path, variant: str, seed: int, ids: dict, overrides: dict, on_tokenizer: bool) -> Path:
    import transformers
    kind = kind_of(variant)
    config_cls, model_cls, kw = kind.variants[variant]
    config = getattr(transformers, config_cls)(**{**kind.base, **kw, **ids, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config)
    draw, bias_std = DRAWS[kind.draws]
    with torch.no_grad():
        for name, param in model.named_parameters():
            draw(name, param, config)
        for name, buf in model.named_buffers():
            if bias_std is not None and name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, bias_std)
        if kind.pad_row_drawn and on_tokenizer:
            model.get_input_embeddings().weight[config.pad_token_id].normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    return out


def checkable(out: Path, variant: str, seed: int = 0, **overrides) -> Path:
    """The variant on the test factory's trained tokenizer (vocabulary, special ids, chat template) with its
    generation and tokenizer configs beside it: a directory `llmdoctor check` runs every check on."""
    from reference_engine.testing import factory
    save(out, variant, seed, factory_ids(), overrides, on_tokenizer=True)
    config = json.loads((out / "config.json").read_text())
    tok = factory.tokenizer_json()
    for name, obj in (("generation_config.json", factory.generation_config(config)),
                      ("tokenizer.json", tok), ("tokenizer_config.json", factory.tokenizer_config(tok, config)),
                      ("special_tokens_map.json", {"bos_token": factory.BOS, "eos_token": factory.IM_END,
                                                   "pad_token": factory.PAD})):
        (out / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


@functools.cache
def model_dir(variant: str, seed: int = 0) -> Path:
    return build(_ROOT / (variant if seed == 0 else f"{variant}-{seed}"), variant, seed)


@functools.cache
def checkable_dir(variant: str) -> Path:
    return checkable(_ROOT / f"{variant}-tok", variant)


def load_hf(path: Path, attention: str | None = "eager", experts: str | None = None):
    """A fresh float32 transformers model in eval mode; eager attention by default (Gemma 2's soft-capping and
    gpt-oss's sinks have no SDPA path), `experts="eager"` for transformers' eager expert loop."""
    import transformers
    kw = {} if attention is None else {"attn_implementation": attention}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    if experts is not None:
        model.set_experts_implementation(experts)
    return model.eval()


@functools.cache
def hf_model(variant: str, seed: int = 0):
    """transformers' model of the cached variant, on the kind's oracle path."""
    if variant in LLAMA_LIKE:
        return load_hf_model(model_dir(variant, seed))
    kind = kind_of(variant)
    return load_hf(model_dir(variant, seed), kind.attention, kind.experts)


def engine(variant: str = "llama_gqa4_tied_bias", **kw):
    from reference_engine.engine import Engine
    return Engine.from_pretrained(model_dir(variant), **kw)


def random_ids(n: int, seed: int = 0) -> list[int]:
    """Token ids past pad, bos and eos (0, 1, 2)."""
    return torch.randint(3, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def any_ids(n: int, seed: int = 0, vocab: int = VOCAB) -> list[int]:
    """Token ids from the whole vocabulary, special ids included."""
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
