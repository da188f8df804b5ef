"""The GGUF fault zoo: a tiny healthy GGUF written with gguf's own GGUFWriter, and variants that each break one
thing the GGF checks look for (metadata rewritten, tensors replaced, bytes cut).

The healthy file is the factory's tiny Llama (reference_engine.testing.factory: 2 layers, hidden 64, a
512-token byte-level BPE with ChatML specials) exported the way convert_hf_to_gguf.py does: llama.cpp tensor
names, Q/K rows permuted, 2-D weights Q8_0, norms F32, tokenizer.ggml.* from its tokenizer.json.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
from gguf.quants import quantize

from reference_engine.testing.factory import (IM_END, PAD, model_config, random_weights, special_ids,
                                              tokenizer_json, tokenizer_length, CHAT_TEMPLATE)

DROP = object()          # a metadata key or tensor to leave out
Q8_0, F32 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.F32
GLOBAL = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
         "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
ARCH_OF = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


@dataclass
class GGUFSpec:
    arch: str
    metadata: dict[str, object]                       # key -> value (typed by `typed`) or (value, vtype, sub)
    tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType]] = field(default_factory=dict)


def gguf_name(hf: str) -> str:
    stem, _, suffix = hf.rpartition(".")
    if stem in GLOBAL:
        return f"{GLOBAL[stem]}.{suffix}"
    _, _, n, rest = stem.split(".", 3)
    return f"blk.{n}.{LAYER[rest]}.{suffix}"


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export_spec(preset: str = "llama", *, seed: int = 0, quant: GGMLQuantizationType = Q8_0, **overrides) -> GGUFSpec:
    """The factory model `preset` as a GGUF spec (what convert_hf_to_gguf.py would write)."""
    tok = tokenizer_json()
    config = model_config(preset, tok, overrides)
    arch = ARCH_OF[preset]
    tensors = {}
    for hf, t in random_weights(config, seed).items():
        w = t.float().numpy()
        if arch == "llama" and hf.endswith("q_proj.weight"):
            w = permute(w, config["num_attention_heads"])
        if arch == "llama" and hf.endswith("k_proj.weight"):
            w = permute(w, config["num_key_value_heads"])
        tensors[gguf_name(hf)] = (w, quant if w.ndim == 2 else F32)
    ids = special_ids(tok)
    n = tokenizer_length(tok)
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    tokens, types = [f"[PAD{i}]" for i in range(n)], [5] * n   # unused fillers for ids no token claims
    for text, i in tok["model"]["vocab"].items():
        tokens[i], types[i] = text, 1
    for added in tok["added_tokens"]:
        tokens[added["id"]], types[added["id"]] = added["content"], 3 if added["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    a = arch
    meta = {
        "general.name": "tiny-zoo-instruct", "general.file_type": (7 if quant == Q8_0 else 0, GGUFValueType.UINT32),
        f"{a}.block_count": config["num_hidden_layers"], f"{a}.context_length": config["max_position_embeddings"],
        f"{a}.embedding_length": config["hidden_size"], f"{a}.feed_forward_length": config["intermediate_size"],
        f"{a}.attention.head_count": config["num_attention_heads"],
        f"{a}.attention.head_count_kv": config["num_key_value_heads"],
        f"{a}.rope.freq_base": float(config["rope_theta"]),
        f"{a}.attention.layer_norm_rms_epsilon": float(config["rms_norm_eps"]),
        f"{a}.rope.dimension_count": head_dim, f"{a}.attention.key_length": head_dim,
        f"{a}.attention.value_length": head_dim,
        f"{a}.vocab_size": n,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY, GGUFValueType.INT32),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": ids["<|begin_of_text|>"], "tokenizer.ggml.eos_token_id": ids[IM_END],
        "tokenizer.ggml.padding_token_id": ids[PAD], "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }
    if config.get("tie_word_embeddings"):
        tensors.pop("output.weight", None)
    return GGUFSpec(arch, meta, tensors)


@lru_cache(maxsize=4)
def _base(preset: str = "llama") -> GGUFSpec:
    return export_spec(preset)


def typed(value) -> tuple[object, GGUFValueType, GGUFValueType | None]:
    if isinstance(value, tuple):
        return value if len(value) == 3 else (value[0], value[1], None)
    if isinstance(value, bool):
        return value, GGUFValueType.BOOL, None
    if isinstance(value, int):
        return value, GGUFValueType.UINT32, None
    if isinstance(value, float):
        return value, GGUFValueType.FLOAT32, None
    if isinstance(value, (str, bytes)):
        return value, GGUFValueType.STRING, None
    if isinstance(value, list):
        first = value[0] if value else ""
        sub = GGUFValueType.STRING if isinstance(first, str) else \
            GGUFValueType.FLOAT32 if isinstance(first, float) else GGUFValueType.INT32
        return value, GGUFValueType.ARRAY, sub
    raise TypeError(type(value))


def write_spec(spec: GGUFSpec, path: Path) -> Path:
    writer = GGUFWriter(str(path), spec.arch)
    for key, value in spec.metadata.items():
        val, vtype, sub = typed(value)
        if vtype == GGUFValueType.STRING and isinstance(val, bytes):
            writer.add_key_value(key, val, vtype)   # raw bytes: lets the zoo write invalid UTF-8
        else:
            writer.add_key_value(key, val, vtype, sub)
    for name, (array, qtype) in spec.tensors.items():
        if qtype == F32:
            writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
        else:
            writer.add_tensor(name, quantize(np.ascontiguousarray(array, dtype=np.float32), qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_variant(directory: Path, name: str, *, metadata: dict | None = None, tensors: dict | None = None,
                  preset: str = "llama") -> Path:
    """The healthy tiny GGUF with metadata keys / tensors replaced (DROP removes one)."""
    base = _base(preset)
    meta = dict(base.metadata)
    for key, value in (metadata or {}).items():
        meta.pop(key, None) if value is DROP else meta.__setitem__(key, value)
    ts = dict(base.tensors)
    for key, value in (tensors or {}).items():
        ts.pop(key, None) if value is DROP else ts.__setitem__(key, value)
    return write_spec(GGUFSpec(base.arch, meta, ts), Path(directory) / name)


def healthy(directory: Path, preset: str = "llama") -> Path:
    return write_variant(directory, f"healthy-{preset}.gguf", preset=preset)


# --------------------------------------------------------------------------- the faults


@dataclass(frozen=True)
class GGUFFault:
    name: str
    check_id: str
    build: Callable[[Path], Path]
    why: str


def _meta(**kv) -> Callable[[Path], Path]:
    fixed = {k.replace("__", "."): v for k, v in kv.items()}
    return lambda d: write_variant(d, "model.gguf", metadata=fixed)


def _tensor(name: str, edit: Callable[[np.ndarray], np.ndarray], qtype=None) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        array, kind = _base().tensors[name]
        return write_variant(d, "model.gguf", tensors={name: (edit(array.copy()), qtype or kind)})
    return build


def _nan(a: np.ndarray) -> np.ndarray:
    a[0, :4] = np.nan
    return a


def _zero_rows(a: np.ndarray) -> np.ndarray:
    a[:8] = 0.0
    return a


def _truncated(d: Path) -> Path:
    path = healthy(d)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 1000])
    return path


def _bad_magic(d: Path) -> Path:
    path = healthy(d)
    data = bytearray(path.read_bytes())
    data[16:24] = (2 ** 62).to_bytes(8, "little")   # metadata count: 4.6e18 key/value pairs
    path.write_bytes(bytes(data))
    return path


def _rope_freqs(n: int) -> Callable[[Path], Path]:
    return lambda d: write_variant(d, "model.gguf", tensors={"rope_freqs.weight": (np.ones(n, np.float32), F32)})


def _ids() -> dict:
    return special_ids(tokenizer_json())


LLAMA31 = {"llama.context_length": 131072, "llama.rope.freq_base": 500000.0}

FAULTS = [
    GGUFFault("pre_tokenizer_missing", "GGF003", _meta(tokenizer__ggml__pre=DROP),
              "no tokenizer.ggml.pre: llama.cpp falls back to 'default' regexes"),
    GGUFFault("pre_tokenizer_default", "GGF003", _meta(tokenizer__ggml__pre="default"),
              "pre = default on a byte-level BPE vocab"),
    GGUFFault("pre_tokenizer_unknown", "GGF003", _meta(tokenizer__ggml__pre="no-such-pre"),
              "a pre-tokenizer llama.cpp refuses to load"),
    GGUFFault("eos_not_end_of_turn", "GGF004",
              lambda d: write_variant(d, "model.gguf",
                                      metadata={"tokenizer.ggml.eos_token_id": _ids()["<|end_of_text|>"]}),
              "EOS is <|end_of_text|> but the template ends turns with <|im_end|>"),
    GGUFFault("bos_twice", "GGF005", _meta(tokenizer__chat_template="{{ bos_token }}{{ bos_token }}" + CHAT_TEMPLATE),
              "a template that starts with {{ bos_token }} twice"),
    GGUFFault("instruct_without_template", "GGF006", _meta(tokenizer__chat_template=DROP),
              "an instruct model with no tokenizer.chat_template"),
    GGUFFault("llama31_rope_freqs_missing", "GGF007", _meta(**{k.replace(".", "__"): v for k, v in LLAMA31.items()}),
              "Llama-3.1-style long context without rope_freqs.weight"),
    GGUFFault("rope_freqs_wrong_length", "GGF007", _rope_freqs(3), "rope_freqs.weight with 3 entries, head_dim/2 = 8"),
    GGUFFault("nan_in_weight", "GGF008", _tensor("blk.0.ffn_up.weight", _nan, F32), "NaN in a weight"),
    GGUFFault("zero_blocks", "GGF008", _tensor("blk.1.attn_v.weight", _zero_rows), "all-zero Q8_0 blocks"),
    GGUFFault("file_type_lies", "GGF009", _meta(general__file_type=(15, GGUFValueType.UINT32)),
              "general.file_type says Q4_K_M, the tensors are Q8_0"),
    GGUFFault("context_beyond_rope_scaling", "GGF010",
              _meta(**{"llama__rope__scaling__type": "linear", "llama__rope__scaling__factor": 2.0,
                       "llama__rope__scaling__original_context_length": 64}),
              "context 256 > 64 x 2 with linear scaling"),
    GGUFFault("yarn_without_factor", "GGF020",
              _meta(llama__rope__scaling__type="yarn", llama__rope__scaling__original_context_length=64),
              "yarn rope scaling with no factor and no config.json beside: llama.cpp stretches nothing"),
    GGUFFault("rope_dimension_count_wrong", "GGF010", _meta(llama__rope__dimension_count=8),
              "rope.dimension_count 8, head_dim 16 (partial rotary llama.cpp would apply, the HF model does not)"),
    GGUFFault("vocab_beyond_embedding", "GGF011",
              lambda d: write_variant(d, "model.gguf", metadata={
                  "tokenizer.ggml.tokens": _base().metadata["tokenizer.ggml.tokens"] + ["extra1", "extra2"],
                  "tokenizer.ggml.token_type": (_base().metadata["tokenizer.ggml.token_type"][0] + [1, 1],
                                                GGUFValueType.ARRAY, GGUFValueType.INT32),
                  "llama.vocab_size": 514}),
              "514 tokens, 512 embedding rows"),
    GGUFFault("name_not_utf8", "GGF002", _meta(general__name=b"tiny-zoo-instruct \xff\xfe"),
              "general.name holds bytes that are not UTF-8"),
    GGUFFault("token_type_length", "GGF012",
              _meta(tokenizer__ggml__token_type=([1] * 10, GGUFValueType.ARRAY, GGUFValueType.INT32)),
              "10 token types for 512 tokens"),
    GGUFFault("bos_id_out_of_range", "GGF012", _meta(tokenizer__ggml__bos_token_id=99999), "BOS id 99999"),
    GGUFFault("truncated_file", "GGF001", _truncated, "the last 1000 bytes are missing"),
    GGUFFault("huge_metadata_count", "GGF001", _bad_magic, "metadata count 2^62"),
]


def rewrite_metadata(src: Path, dst: Path, changes: dict) -> Path:
    """A copy of a tensor-less GGUF (llama.cpp's vocab files) with metadata keys changed (DROP removes one)."""
    from reference_engine.files.gguf_file import GGUFFile
    g = GGUFFile.open(src)
    if g.tensors:
        raise ValueError("rewrite_metadata copies metadata only")
    meta = {}
    for key, value in g.metadata.items():
        if key == "general.architecture":
            continue
        kind, sub = g.value_types[key]
        meta[key] = (value, GGUFValueType(kind), None if sub is None else GGUFValueType(sub))
    for key, value in changes.items():
        meta.pop(key, None) if value is DROP else meta.__setitem__(key, value)
    return write_spec(GGUFSpec(g.metadata["general.architecture"], meta), dst)
