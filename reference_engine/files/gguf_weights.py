"""A GGUF file seen as a weight source with the `Weights` interface (`.names`, `.info`, `.get`, `.files`),
under Hugging Face tensor names, dequantized tensor by tensor on demand.

    weights = GGUFWeights.open("model.gguf")
    weights.get("model.layers.0.self_attn.q_proj.weight")   # float32 [out, in], Q/K permutation undone

Only the asked tensor is dequantized (gguf's kernels, numpy for the moment it runs, then torch); nothing
holds the whole model. `find_gguf(path)` tells whether a path is a GGUF model (a .gguf file, or a directory
without config.json holding exactly one .gguf).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.files.gguf_arch import (ARCHS, EXTRA_TENSORS, GGUFArch, expert_pattern, hf_tensor_name, is_norm,
                                              layer_kinds, stem_sets, transposed_part)
from reference_engine.files.gguf_file import GGUFFile, GGUFTensor, find_gguf  # noqa: F401 (re-export)
from reference_engine.files.gguf_mxfp4 import TORCH_KERNELS
from reference_engine.files.reads import SAFETENSORS_DTYPES
from reference_engine.files.weights import TensorInfo, TensorTable

# ggml's unquantized types: viewed as torch dtypes, not dequantized; they share safetensors' dtype names
TORCH_TYPES = {name: SAFETENSORS_DTYPES[name] for name in ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64")}


@dataclass(frozen=True)
class GGUFTensorInfo(TensorInfo):
    ggml_type: str = "F32"          # the stored type (Q4_1, Q8_0, F16, ...); `dtype` is what get() returns
    gguf_name: str = ""


def gguf_arch(gguf: GGUFFile) -> GGUFArch:
    name = gguf.get("general.architecture")
    if not isinstance(name, str):
        raise ModelDirError(gguf.path, "no general.architecture string in the GGUF metadata")
    if name not in ARCHS:
        raise UnsupportedError(gguf.path, f"unsupported GGUF architecture {name!r} "
                                          f"(supported: {', '.join(ARCHS)})")
    return ARCHS[name]


def dequantize(gguf: GGUFFile, tensor: GGUFTensor) -> torch.Tensor:
    """The tensor in torch order, float32 for float/quantized types (ints keep their type)."""
    raw = gguf.tensor_bytes(tensor)   # uint8 view into the memory map
    kind = tensor.type_name
    if kind in TORCH_TYPES:
        out = raw.view(TORCH_TYPES[kind]).reshape(tensor.shape)
        return out.float() if out.is_floating_point() else out.clone()
    rows = raw.reshape(-1, tensor.nbytes // max(1, tensor.numel // tensor.dims[0]))   # [rows, row bytes]
    if kind in TORCH_KERNELS:                                                          # ours, in torch (MXFP4)
        return TORCH_KERNELS[kind](rows, tensor.dims[0]).reshape(tensor.shape)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize
    try:
        values = gguf_dequantize(rows.numpy(), GGMLQuantizationType(tensor.ggml_type))  # [rows, row length]
    except NotImplementedError:
        raise UnsupportedError(gguf.path, f"tensor {tensor.name!r}: gguf cannot dequantize {kind}") from None
    return torch.from_numpy(values).reshape(tensor.shape).float()


def unpermute(weight: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo convert_hf_to_gguf's permute() of q/k rows (llama.cpp pairs rotary dims as (i, i + d/2) rows
    interleaved): [heads * 2 * half, ...] -> per head, the two halves back in Hugging Face order."""
    shape = weight.shape
    half = shape[0] // n_head // 2
    return weight.reshape(n_head, half, 2, *shape[1:]).transpose(1, 2).reshape(shape)


def _part_shape(t: GGUFTensor) -> tuple:
    """A part's shape once composed: a weight [.., rows, cols] transposed, a bias as stored."""
    return (*t.shape[:-2], t.shape[-1], t.shape[-2]) if t.name.endswith(".weight") else tuple(t.shape)


def _as_part(values: torch.Tensor, t: GGUFTensor) -> torch.Tensor:
    return values.transpose(-1, -2) if t.name.endswith(".weight") else values


class GGUFWeights(TensorTable):
    """Name -> dequantized tensor over one validated GGUF file, under Hugging Face names."""

    dequantizes = True   # readers must use get(), not the raw bytes at info.offset (they are quantized)

    def __init__(self, gguf: GGUFFile, arch: GGUFArch):
        kinds = layer_kinds(gguf, arch)         # which tensors a layer needs depends on its kind
        if kinds is not None and not kinds.readable:
            raise ModelDirError(gguf.path, kinds.problem)
        self.gguf, self.arch = gguf, arch
        self.misfiled = kinds.misfiled if kinds is not None else frozenset()   # q/k stored unpermuted there
        self._infos: dict[str, GGUFTensorInfo] = {}
        self.extra: dict[str, GGUFTensor] = {}         # llama.cpp-only tensors (rope_freqs, ...)
        self.unmapped: list[str] = []                 # tensors with no known Hugging Face name
        self._slices: dict[str, GGUFTensor] = {}       # per-expert views of stacked expert tensors
        self._composed: dict[str, list[GGUFTensor]] = {}   # Hugging Face name -> parts (arch.transposed)
        for t in gguf.tensors.values():
            if transposed_part(t.name, arch) is not None:
                continue
            if expert_pattern(t.name, arch) is not None:
                self._add_experts(t, expert_pattern(t.name, arch))
                continue
            hf = hf_tensor_name(t.name, arch)
            if hf is None:
                (self.extra.__setitem__(t.name, t) if t.name in EXTRA_TENSORS else self.unmapped.append(t.name))
                continue
            if hf in self._infos:
                raise ModelDirError(gguf.path, f"tensors {self._infos[hf].gguf_name!r} and {t.name!r} both map "
                                               f"to {hf!r}")
            shape = arch.hf_shape(hf, t.shape) if arch.hf_shape is not None else t.shape
            self._infos[hf] = GGUFTensorInfo(hf, "F32", shape, gguf.path, t.offset, t.nbytes,
                                             ggml_type=t.type_name, gguf_name=t.name)
        self._add_transposed()
        self.heads = gguf.get(f"{gguf.get('general.architecture')}.attention.head_count")
        self.kv_heads = gguf.get(f"{gguf.get('general.architecture')}.attention.head_count_kv", self.heads)
        if isinstance(self.kv_heads, list):       # per layer (a hybrid's: 0 on its recurrent layers)
            self.kv_heads = max(kinds.head_count_kv if kinds is not None else self.kv_heads, default=None)

    def _add_experts(self, t: GGUFTensor, pattern: str) -> None:
        """A stacked [experts, rows, cols] tensor as one tensor per expert: expert e's rows are the e-th
        contiguous stretch of its bytes (whole quantization blocks: blocks never straddle rows)."""
        if len(t.dims) != 3 or t.nbytes % t.dims[2]:
            raise ModelDirError(self.gguf.path, f"expert tensor {t.name!r} has shape {list(t.shape)}, expected "
                                                f"[experts, rows, cols]")
        size = t.nbytes // t.dims[2]
        for e in range(t.dims[2]):
            part = GGUFTensor(f"{t.name}[{e}]", t.dims[:2], t.ggml_type, t.offset + e * size, size)
            name = pattern.format(e=e)
            self._slices[name] = part
            self._infos[name] = GGUFTensorInfo(name, "F32", part.shape, self.gguf.path, part.offset, size,
                                               ggml_type=t.type_name, gguf_name=t.name)

    def _add_transposed(self) -> None:
        """Hugging Face tensors built from several llama.cpp ones (arch.transposed): [.., rows_i, cols] parts
        -> [.., cols, sum rows_i] (Llama 4: gate and up experts [E, inter, hidden] -> gate_up [E, hidden, 2 inter]);
        (arch.interleaved) parts -> [.., n * last], part i in every n-th column (gpt-oss: gate [E, inter, hidden]
        and up -> gate_up [E, hidden, 2 inter], gate columns even; their biases [E, inter] -> [E, 2 inter])."""
        found: dict[str, dict[str, GGUFTensor]] = {}
        for t in self.gguf.tensors.values():
            where = transposed_part(t.name, self.arch)
            if where is not None:
                key = t.name.split(".", 2)[2] if where[1] in self.arch.interleaved else t.name.split(".")[2]
                found.setdefault(f"model.layers.{where[0]}.{where[1]}", {})[key] = t
        for name, parts in found.items():
            inner = name.split(".", 3)[3]
            choices = [self.arch.interleaved[inner]] if inner in self.arch.interleaved else \
                stem_sets(self.arch.transposed[inner])
            stems = next((c for c in choices if set(parts) == set(c)), None)
            ordered = [parts[s] for s in stems] if stems else list(parts.values())
            shape = self._joined_shape(name, ordered) if stems else None
            if shape is None:
                raise ModelDirError(self.gguf.path, f"tensors {sorted(parts)} of {name!r} are missing or disagree "
                                                    f"in shape")
            self._composed[name] = ordered
            self._infos[name] = GGUFTensorInfo(name, "F32", shape, self.gguf.path, ordered[0].offset,
                                               sum(p.nbytes for p in ordered), ggml_type=ordered[0].type_name,
                                               gguf_name=ordered[0].name)

    def _joined_shape(self, name: str, parts: list[GGUFTensor]) -> tuple | None:
        """The Hugging Face shape of a tensor joined from parts: arch.join_shape, else the parts (weights
        [.., rows_i, cols] transposed, biases as stored) concatenated, or interleaved, along the last dim."""
        inner = name.split(".", 3)[3]
        if self.arch.join_shape is not None and inner not in self.arch.interleaved:
            return self.arch.join_shape(inner, [p.shape for p in parts])
        shapes = [_part_shape(p) for p in parts]
        if len({s[:-1] for s in shapes}) != 1 or (inner in self.arch.interleaved and len(set(shapes)) != 1):
            return None
        return (*shapes[0][:-1], sum(s[-1] for s in shapes))

    def meta(self, key: str):
        """The metadata value `{architecture}.<key>` (None when absent)."""
        return self.gguf.get(f"{self.gguf.get('general.architecture')}.{key}")

    def composed(self, name: str) -> bool:
        """Whether the Hugging Face tensor is built from several GGUF tensors (read it whole with get())."""
        return name in self._composed

    def stored_tensor(self, name: str) -> GGUFTensor:
        """The GGUF tensor (or per-expert slice of one) behind a Hugging Face name."""
        return self._slices.get(name) or self.gguf.tensors[self._infos[name].gguf_name]

    @classmethod
    def open(cls, path: str | Path) -> "GGUFWeights":
        gguf = GGUFFile.open(path)
        return cls(gguf, gguf_arch(gguf))

    names = property(lambda self: list(self._infos))
    files = property(lambda self: [self.gguf.path])
    metadata = property(lambda self: {self.gguf.path: {}})
    headers = property(lambda self: {})

    def get(self, name: str) -> torch.Tensor:
        """The tensor as Hugging Face stores it (float32), dequantized now; only its bytes are read."""
        if name in self._composed:
            return self._compose(name)
        tensor = self.stored_tensor(name)
        try:
            out = dequantize(self.gguf, tensor)
        except (ValueError, RuntimeError) as e:
            raise ModelDirError(self.gguf.path, f"tensor {tensor.name!r}: cannot dequantize: {e}") from None
        return self.hf_layout(name, out)

    def _compose(self, name: str) -> torch.Tensor:
        try:
            values = [dequantize(self.gguf, t) for t in self._composed[name]]
        except (ValueError, RuntimeError) as e:
            raise ModelDirError(self.gguf.path, f"tensor {name!r}: cannot dequantize: {e}") from None
        inner = name.split(".", 3)[3]
        if self.arch.join is not None and inner not in self.arch.interleaved:
            try:
                return self.arch.join(inner, values, self.meta)
            except ValueError as e:                  # the parts disagree with the metadata
                raise ModelDirError(self.gguf.path, f"tensor {name!r}: {e}") from None
        parts = [_as_part(v, t) for v, t in zip(values, self._composed[name])]
        if inner in self.arch.interleaved:
            return torch.stack(parts, dim=-1).flatten(-2).contiguous()     # [.., cols, n]: part i at j * n + i
        return torch.cat(parts, dim=-1).contiguous()

    def hf_layout(self, name: str, out: torch.Tensor) -> torch.Tensor:
        """A dequantized tensor as Hugging Face stores it: Q/K permutation undone, norm offset removed (the
        streaming reader, readers/gguf_reader.py, dequantizes on its own and finishes here too)."""
        tensor = self.stored_tensor(name)
        if self.arch.permute_qk and name.endswith(("q_proj.weight", "k_proj.weight")) and \
                not (self.misfiled and int(name.split(".")[2]) in self.misfiled):
            heads = self.heads if name.endswith("q_proj.weight") else self.kv_heads
            if not isinstance(heads, int) or heads < 1 or out.shape[0] % (2 * heads):
                raise ModelDirError(self.gguf.path, f"tensor {tensor.name!r}: {out.shape[0]} rows do not split "
                                                    f"into {heads!r} heads")
            out = unpermute(out, heads)
        if self.arch.norm_offset and is_norm(name):
            out = out - self.arch.norm_offset
        if self.arch.touches is not None and self.arch.touches(name):
            try:
                out = self.arch.finish(name, out, self.meta)
            except (TypeError, ValueError, ZeroDivisionError, RuntimeError) as e:   # sizes the metadata lacks
                raise ModelDirError(self.gguf.path, f"tensor {tensor.name!r}: cannot map it back to {name} with "
                                                    f"this file's metadata ({e})") from None
        return out.reshape(self._infos[name].shape)       # a unit dim llama.cpp squeezed out (LFM2's conv)
