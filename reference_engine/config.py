"""Typed configuration of a Hugging Face style model directory (config.json, generation_config.json,
tokenizer_config.json). Only reads; never writes into the model directory."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference_engine.architectures import (ALWAYS_BIASED, CLASS_DEFAULTS, DEFAULT_ROPE_THETA, MODEL_TYPES,
                                             OWN_FIELDS, QK_NORMED, ROPE_HEAD_DIM)
from reference_engine.errors import ModelDirError
from reference_engine.limits import check_config_sizes

# Each family's facts (model types, its config class's defaults and own field names, the RoPE base and rotary
# head rules) live in its module under reference_engine/architectures; which architectures the engine can run is
# the core's business (reference_engine/core/families); config parsing reads any causal decoder.
# canonical field -> the other names configs use for it (GPT-2/BLOOM/Falcon/MPT/T5-style spellings)
ALIASES = {
    "hidden_size": ("n_embd", "d_model", "dim", "model_dim"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("n_head", "num_heads", "n_heads"),
    "num_key_value_heads": ("num_kv_heads", "n_head_kv", "n_kv_heads", "num_key_value_groups_total"),
    "intermediate_size": ("n_inner", "ffn_dim", "ffn_hidden_size", "d_ff"),
    "max_position_embeddings": ("n_positions", "n_ctx", "max_seq_len", "seq_length", "max_sequence_length"),
    "rms_norm_eps": ("layer_norm_epsilon", "layer_norm_eps", "norm_epsilon", "norm_eps"),
}
MAX_JSON_BYTES = 64 * 1024 * 1024  # a config bigger than this is not a config


def read_json(path: str | Path) -> dict:
    """Parse a JSON object file, turning every failure into a one-line ModelDirError."""
    path = Path(path)
    if not path.is_file():
        raise ModelDirError(path, "file not found")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise ModelDirError(path, f"file is {path.stat().st_size} bytes, too large for a JSON config")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ModelDirError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ModelDirError(path, f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict):
        raise ModelDirError(path, f"expected a JSON object, found {type(data).__name__}")
    return data


@dataclass
class ModelConfig:
    architecture: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k before RoPE
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    torch_dtype: str | None = None
    head_dim_explicit: bool = False  # head_dim came from config.json, not hidden/heads
    wrapper: str | None = None       # the multimodal class whose text decoder this is (Gemma3ForConditionalGeneration)
    # the engine family's own settings, bound by reference_engine.core.families.bind() (None until then)
    family: Any = field(default=None, repr=False, compare=False)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def eos_token_ids(self) -> list[int]:
        return _as_id_list(self.eos_token_id)


def _as_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int)]
    return [value] if isinstance(value, int) else []


def _require_int(raw: dict, key: str, path: Path, minimum: int = 1) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelDirError(path, f"'{key}' must be an integer, found {value!r}")
    if value < minimum:
        raise ModelDirError(path, f"'{key}' must be >= {minimum}, found {value}")
    return value


def architecture_of(raw: dict, path: Path) -> str:
    """The architecture class name: `architectures[0]`, else the one a known `model_type` implies. Any name
    is accepted here; whether the engine implements it is decided by the core (core/families)."""
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    if raw.get("model_type") in MODEL_TYPES:
        return MODEL_TYPES[raw["model_type"]]
    raise ModelDirError(path, "no 'architectures' and no known 'model_type'")


def model_type_of(architecture: str) -> str:
    """The first model_type MODEL_TYPES maps to this architecture ("" if none)."""
    return next((k for k, v in MODEL_TYPES.items() if v == architecture), "")


def text_decoder_of(raw: dict, arch: str) -> str | None:
    """The text decoder's architecture inside a multimodal wrapper (`...ForConditionalGeneration` with a
    `text_config`, or a flat Qwen-VL config), else None. The engine runs that decoder; the vision tower is only
    read by the file checks."""
    if not arch.endswith("ForConditionalGeneration"):
        return None
    text = raw.get("text_config")
    model_type = text.get("model_type") if isinstance(text, dict) else raw.get("model_type")
    return MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None


def with_aliases(raw: dict) -> dict:
    """config.json with the canonical field names filled in: a multimodal wrapper's `text_config` (Gemma 3,
    LLaVA-style) is lifted to the top, and GPT-2-style spellings (`n_embd`, `n_layer`, ...) are copied to
    the names the rest of the code reads. The original keys stay; an existing canonical key wins."""
    text = raw.get("text_config")
    merged = dict(raw)
    if isinstance(text, dict) and not isinstance(raw.get("hidden_size"), int):
        merged = {**raw, **{k: v for k, v in text.items() if k not in ("architectures",)}}
    for canonical, names in ALIASES.items():
        if merged.get(canonical) is None:
            found = next((merged[n] for n in names if merged.get(n) is not None), None)
            if found is not None:
                merged[canonical] = found
    if merged.get("num_key_value_heads") is None and merged.get("multi_query") is True:
        merged["num_key_value_heads"] = 1
    if merged.get("intermediate_size") is None and isinstance(merged.get("hidden_size"), int):
        merged["intermediate_size"] = 4 * merged["hidden_size"]    # GPT-2's n_inner = None convention
    return merged


def rope_settings(raw: dict, path: Path, model_type: str | None = None) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from the classic fields or transformers 5's "rope_parameters" object,
    which holds rope_theta together with the scaling keys (rope_type "default" means no scaling)."""
    params = raw.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise ModelDirError(path, f"'rope_parameters' must be an object or null, found {params!r}")
    params = params or {}
    default = DEFAULT_ROPE_THETA.get(model_type or raw.get("model_type"), 10000.0)
    theta = raw.get("rope_theta", params.get("rope_theta", default))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ModelDirError(path, f"'rope_theta' must be a positive number, found {theta!r}")
    scaling = raw.get("rope_scaling")
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if scaling is not None and not isinstance(scaling, dict):
        raise ModelDirError(path, f"'rope_scaling' must be an object or null, found {scaling!r}")
    return float(theta), scaling


def partial_rotary_factor(raw: dict, head_dim: int | None, block: dict | None = None) -> float:
    """Share of each head's dimensions that rotate: the rope block's partial_rotary_factor, else the config's,
    else MiniMax-M2's `rotary_dim` / head_dim, else the config class's default (Qwen3-Next 0.25, GLM-4.5 0.5),
    else 1. The one reading of the rotary width: the engine's rope table and the CFG/GGF checks share it."""
    named = raw.get("model_type")
    for source in (block or {}, raw, CLASS_DEFAULTS.get(named, {}) if isinstance(named, str) else {}):
        value = source.get("partial_rotary_factor")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        legacy = source.get("rotary_dim") if source is raw else None
        if isinstance(legacy, int) and not isinstance(legacy, bool) and legacy > 0 and head_dim:
            return legacy / head_dim
    return 1.0


def rotary_width(raw: dict, head_dim: int, block: dict | None = None) -> int:
    """rotary_dim: the dimensions of each head that rotate (Phi-4-mini: 96 of 128; the rest pass through)."""
    return int(head_dim * partial_rotary_factor(raw, head_dim, block))


def class_fields(raw: dict, model_type: str | None) -> dict:
    """raw with the canonical fields set from the names the model type's config class reads (OWN_FIELDS)."""
    own = OWN_FIELDS.get(model_type, {})
    return {**raw, **{canonical: raw[name] for canonical, name in own.items() if raw.get(name) is not None}}


def parse_config(raw: dict, path: str | Path = "config.json") -> ModelConfig:
    """Build a ModelConfig from a config.json dict; raise ModelDirError naming the bad field."""
    path = Path(path)
    wrapper = architecture_of(raw, path)
    arch = text_decoder_of(raw, wrapper) or wrapper
    wrapper = wrapper if arch != wrapper else None
    raw = with_aliases(raw)
    named = raw.get("model_type")
    named = named if isinstance(named, str) else model_type_of(arch)
    raw = class_fields({**CLASS_DEFAULTS.get(named, {}), **raw}, named)
    check_config_sizes(raw, path)   # every declared size bounded before anything is sized from it
    hidden = _require_int(raw, "hidden_size", path)
    heads = _require_int(raw, "num_attention_heads", path)
    kv_heads = raw.get("num_key_value_heads") or heads
    if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1:
        raise ModelDirError(path, f"'num_key_value_heads' must be a positive integer, found {kv_heads!r}")
    explicit = isinstance(raw.get("head_dim"), int) and not isinstance(raw.get("head_dim"), bool)
    head_dim = raw["head_dim"] if explicit else hidden // heads
    rope_dim = raw.get("qk_rope_head_dim", ROPE_HEAD_DIM.get(arch))
    if arch in ROPE_HEAD_DIM and isinstance(rope_dim, int) and not isinstance(rope_dim, bool) and rope_dim > 0:
        head_dim, explicit = rope_dim, True
    model_type = raw.get("model_type") or model_type_of(arch)
    rope_theta, rope_scaling = rope_settings(raw, path, named)
    return ModelConfig(
        architecture=arch,
        model_type=model_type,
        vocab_size=_require_int(raw, "vocab_size", path),
        hidden_size=hidden,
        intermediate_size=_require_int(raw, "intermediate_size", path),
        num_hidden_layers=_require_int(raw, "num_hidden_layers", path),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        # Qwen2 always has q/k/v bias; Llama/Mistral/Qwen3 say so in attention_bias
        attention_bias=arch in ALWAYS_BIASED or bool(raw.get("attention_bias", False)),
        qk_norm=arch in QK_NORMED,
        # Qwen configs gate the window with use_sliding_window; Mistral/Mixtral/Phi-3/Gemma apply it when set
        sliding_window=(raw.get("sliding_window") or None) if raw.get("use_sliding_window",
                                                                       not arch.startswith("Qwen")) else None,
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id"),
        pad_token_id=raw.get("pad_token_id"),
        torch_dtype=raw.get("torch_dtype") or raw.get("dtype"),
        head_dim_explicit=explicit,
        wrapper=wrapper,
        raw=raw,
    )


def model_dir_path(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not path.exists():
        raise ModelDirError(path, "no such directory")
    if not path.is_dir():
        raise ModelDirError(path, "not a directory")
    return path


def load_config(model_dir: str | Path) -> ModelConfig:
    path = model_dir_path(model_dir) / "config.json"
    return parse_config(read_json(path), path)


@dataclass
class GenerationConfig:
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)
    pad_token_id: int | None = None
    max_new_tokens: int | None = None
    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    raw: dict = field(default_factory=dict, repr=False)


def load_generation_config(model_dir: str | Path) -> GenerationConfig | None:
    path = model_dir_path(model_dir) / "generation_config.json"
    if not path.exists():
        return None
    raw = read_json(path)
    return GenerationConfig(
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=_as_id_list(raw.get("eos_token_id")),
        pad_token_id=raw.get("pad_token_id"),
        max_new_tokens=raw.get("max_new_tokens"),
        do_sample=bool(raw.get("do_sample", False)),
        temperature=raw.get("temperature"),
        top_k=raw.get("top_k"),
        top_p=raw.get("top_p"),
        repetition_penalty=raw.get("repetition_penalty"),
        raw=raw,
    )


def load_tokenizer_config(model_dir: str | Path) -> dict:
    """tokenizer_config.json as a dict ({} when absent)."""
    path = model_dir_path(model_dir) / "tokenizer_config.json"
    return read_json(path) if path.exists() else {}
