"""Write a shape-faithful random-weight Llama-3 checkpoint for memory and speed measurements
(benchmarks/memory.py): real shapes, so the planner's sizes are a 7B's, without downloading one.

    python scripts/make_synthetic_model.py --shape llama-1b --dtype bfloat16 -o /tmp/llama-1b

Shapes are Llama-3.2-1B and Llama-3.1-8B (hidden, layers, intermediate, GQA 32/8, vocab 128256, llama3 RoPE
scaling). The tokenizer is a real one: SmolLM2's (from the test asset cache, LLMDOCTOR_CACHE or
~/.cache/llmdoctor/smollm2-135m-instruct); its 49152 ids are a subset of the 128256 embedding rows. Weights are random
normal (std 0.02, norms 1.0), generated and written in chunks, so this script stays under ~300 MB whatever
the shape (a 16 GB checkpoint is written on a machine with 4 GB).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {
    "llama-1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=8192, tie_word_embeddings=True),
    "llama-8b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=14336, tie_word_embeddings=False),
    "llama-tiny": dict(hidden_size=256, num_hidden_layers=4, intermediate_size=512, tie_word_embeddings=False),
}
DTYPES = {"bfloat16": (torch.bfloat16, "BF16"), "float16": (torch.float16, "F16"), "float32": (torch.float32, "F32")}
CHUNK = 16 << 20        # elements generated at a time
VOCAB = 128256


def config_for(shape: str, dtype: str) -> dict:
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False, mlp_bias=False,
                num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
                rope_scaling={"factor": 8.0 if shape != "llama-1b" else 32.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                              "rope_type": "llama3"},
                vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=2, initializer_range=0.02,
                use_cache=True, torch_dtype=dtype, **SHAPES[shape])


def tensor_shapes(cfg: dict) -> list[tuple[str, tuple[int, ...], float]]:
    """(name, shape, std) in file order; std 0 means a norm weight (ones)."""
    h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    d = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    out = [("model.embed_tokens.weight", (VOCAB, h), 0.02)]
    for layer in range(n):
        p = f"model.layers.{layer}."
        out += [(p + "input_layernorm.weight", (h,), 0.0), (p + "post_attention_layernorm.weight", (h,), 0.0),
                (p + "self_attn.q_proj.weight", (q, h), 0.02), (p + "self_attn.k_proj.weight", (kv, h), 0.02),
                (p + "self_attn.v_proj.weight", (kv, h), 0.02), (p + "self_attn.o_proj.weight", (h, q), 0.02),
                (p + "mlp.gate_proj.weight", (i, h), 0.02), (p + "mlp.up_proj.weight", (i, h), 0.02),
                (p + "mlp.down_proj.weight", (h, i), 0.02)]
    out.append(("model.norm.weight", (h,), 0.0))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (VOCAB, h), 0.02))
    return out


def write_weights(path: Path, tensors, dtype: torch.dtype, code: str, seed: int) -> int:
    size = torch.finfo(dtype).bits // 8
    header, offset = {"__metadata__": {"format": "pt", "synthetic": "llmdoctor scripts/make_synthetic_model.py"}}, 0
    for name, shape, _ in tensors:
        nbytes = size
        for s in shape:
            nbytes *= s
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    gen = torch.Generator().manual_seed(seed)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name, shape, std in tensors:
            numel = 1
            for s in shape:
                numel *= s
            for start in range(0, numel, CHUNK):
                n = min(CHUNK, numel - start)
                chunk = (torch.ones(n, dtype=dtype) if std == 0.0
                         else torch.empty(n, dtype=torch.float32).normal_(0.0, std, generator=gen).to(dtype))
                f.write(memoryview((ctypes.c_char * (n * size)).from_address(chunk.data_ptr())))
            print(f"\r{name:60s}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return offset


def copy_tokenizer(out: Path) -> None:
    cache = Path(os.environ.get("LLMDOCTOR_CACHE", Path.home() / ".cache" / "llmdoctor")) / "smollm2-135m-instruct"
    if not (cache / "tokenizer.json").exists():
        sys.exit(f"no SmolLM2 tokenizer under {cache}: run the test suite once to fetch it")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(cache / name, out / name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = config_for(args.shape, args.dtype)
    cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    (args.out / "config.json").write_text(json.dumps(cfg, indent=2))
    (args.out / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    copy_tokenizer(args.out)
    dtype, code = DTYPES[args.dtype]
    nbytes = write_weights(args.out / "model.safetensors", tensor_shapes(cfg), dtype, code, args.seed)
    print(f"wrote {args.out} ({nbytes / 1e9:.2f} GB of {args.dtype} weights)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
