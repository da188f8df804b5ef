"""Broken copies of a real float model that load and run but talk nonsense: each a fault a
conversion or packing step really makes, written as the faulty tool would write it. `effective` holds the
weights a correct loader reads from the broken files (the oracle: transformers runs them as a float model,
tests/checks/competence/oracle.py, and must find nonsense before the fault counts).

    build = BROKEN["rope_twice"](smollm2_dir, tmp / "model")   # -> Broken(path, effective)
"""
from __future__ import annotations

import json
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from tests.quant_builders import AWQ_ORDER, _as_int32, awq, load_float

LAYER = re.compile(r"^model\.layers\.(\d+)\.")


@dataclass
class Broken:
    path: Path
    effective: dict[str, torch.Tensor]      # what a correct loader reads from the broken files (float32)


def copy_files(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "model.safetensors.index.json":
            shutil.copy(f, dst / f.name)


def float_dir(src: Path, dst: Path, weights: dict[str, torch.Tensor]) -> Broken:
    copy_files(src, dst)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(dst / "model.safetensors"))
    return Broken(dst, {k: v.float() for k, v in weights.items()})


def heads(config: dict, name: str) -> int:
    return config["num_attention_heads"] if "q_proj" in name else config["num_key_value_heads"]


def rope_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """convert_hf_to_gguf's LlamaModel.permute: HF's half-split rotary rows -> llama.cpp's interleaved rows."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_twice(src, dst) -> Broken:
    """Q/K rows permuted for llama.cpp's rotary layout by a converter, then once more by a second one that did
    not know (an HF checkpoint re-exported from a GGUF round trip): RoPE rotates the wrong pairs."""
    config, w = load_float(src)
    for name in [n for n in w if n.endswith(("q_proj.weight", "k_proj.weight"))]:
        w[name] = rope_permute(rope_permute(w[name], heads(config, name)), heads(config, name))
    return float_dir(src, dst, w)


def layers_shuffled(src, dst) -> Broken:
    """The layers written under the wrong indices (a merge of shards in the wrong order): layer i holds the
    weights of layer (i * 7) % n, a fixed permutation."""
    config, w = load_float(src)
    n = config["num_hidden_layers"]
    perm = [(i * 7) % n if n % 7 else (n - 1 - i) for i in range(n)]
    out = {}
    for name, t in w.items():
        m = LAYER.match(name)
        if m:
            name = f"model.layers.{perm.index(int(m.group(1)))}." + name[m.end():]
        out[name] = t
    return float_dir(src, dst, out)


def transposed(src, dst) -> Broken:
    """Square projections (q_proj, o_proj) stored transposed (a converter that forgot nn.Linear's [out, in]):
    the shapes still match, so nothing in the files says so."""
    _, w = load_float(src)
    for name in [n for n in w if n.endswith(("q_proj.weight", "o_proj.weight"))]:
        if w[name].shape[0] == w[name].shape[1]:
            w[name] = w[name].T.contiguous()
    return float_dir(src, dst, w)


def norms_lost(src, dst) -> Broken:
    """Every RMSNorm gain reset to ones (a converter that dropped the norms and let the loader initialise them)."""
    _, w = load_float(src)
    for name in [n for n in w if n.endswith("norm.weight")]:
        w[name] = torch.ones_like(w[name])
    return float_dir(src, dst, w)


def dtype_relabelled(src, dst) -> Broken:
    """bfloat16 tensors whose header says float16 (same size, so the file validates): every value is the
    other format's bits."""
    _, w = load_float(src)
    b = {k: v.to(torch.bfloat16) for k, v in w.items()}
    copy_files(src, Path(dst))
    path = Path(dst) / "model.safetensors"
    save_file({k: v.contiguous() for k, v in b.items()}, str(path))
    raw = bytearray(path.read_bytes())
    size = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + size].decode().replace('"BF16"', '"F16" ').encode()    # same length: offsets unchanged
    assert len(header) == size
    raw[8:8 + size] = header
    path.write_bytes(bytes(raw))
    config = json.loads((Path(dst) / "config.json").read_text())
    (Path(dst) / "config.json").write_text(json.dumps({**config, "torch_dtype": "float16", "dtype": "float16"}))
    return Broken(Path(dst), {k: v.view(torch.float16).float() for k, v in b.items()})


def awq_plain_order(src, dst) -> Broken:
    """AWQ (GEMM) int4 codes packed in plain order (nibble i = column 8c + i) instead of AutoAWQ's interleaved
    order [0, 2, 4, 6, 1, 3, 5, 7]: every loader unpacks column 8c + ORDER[i] from nibble i, so the codes and
    zero points of every projection's output columns are shuffled within each group of 8 while the scales
    stay in place (the example the competence family was built on)."""
    from safetensors.torch import load_file
    build = awq(src, dst)
    tensors = load_file(str(build.path / "model.safetensors"))
    effective = dict(build.dequantized)
    group = build.config["group_size"]
    for name in build.quantized:
        p = name[: -len(".weight")]
        q, z = unpack_awq(tensors[f"{p}.qweight"]), unpack_awq(tensors[f"{p}.qzeros"])     # [in, out], [in/G, out]
        out_f = q.shape[1]
        lands = torch.tensor([8 * (e // 8) + AWQ_ORDER.index(e % 8) for e in range(out_f)])  # true column read as e
        scales = tensors[f"{p}.scales"].float().repeat_interleave(group, 0)                    # [in, out]
        effective[name] = ((q[:, lands] - z.repeat_interleave(group, 0)[:, lands]) * scales).T.contiguous()
        for part in ("qweight", "qzeros"):
            tensors[f"{p}.{part}"] = repack_plain(tensors[f"{p}.{part}"])
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(build.path / "model.safetensors"),
              metadata={"format": "pt"})
    return Broken(build.path, effective)


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """AutoAWQ-interleaved int32 [rows, cols/8] -> float codes [rows, cols] (column 8c + ORDER[i] = nibble i)."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    out = torch.zeros(words.shape[0], words.shape[1] * 8)
    for i in range(8):
        out[:, AWQ_ORDER[i]::8] = ((words >> (4 * i)) & 0xF).float()
    return out


def repack_plain(packed: torch.Tensor) -> torch.Tensor:
    """AWQ-interleaved int32 words -> the same nibbles in plain order (nibble i holds column 8c + i)."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    nibbles = [(words >> (4 * i)) & 0xF for i in range(8)]            # nibble i holds column 8c + ORDER[i]
    out = torch.zeros_like(words)
    for i in range(8):
        out |= nibbles[AWQ_ORDER.index(i)] << (4 * i)                 # column 8c + i into nibble i
    return _as_int32(out.numpy().astype("uint32"))


BROKEN = {"awq_plain_order": awq_plain_order, "rope_twice": rope_twice, "layers_shuffled": layers_shuffled,
          "transposed": transposed, "norms_lost": norms_lost, "dtype_relabelled": dtype_relabelled}
