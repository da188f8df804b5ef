"""A quantized safetensors directory seen as a tensor table under logical Hugging Face names.

    table = QuantizedWeights.open(model_dir, quantization_config)
    table.get("model.layers.0.mlp.down_proj.weight")   # float32 [out, in], dequantized now
    table.raw                                          # the stored Weights: qweight, scales, zeros, g_idx ...
    table.read_bytes(name)                             # bytes read from disk to produce that tensor

A format module (gptq, awq, compressed_tensors, fp8, bnb) turns the stored tensors into `QuantModule`s:
which stored tensors make one logical weight, its shape, and the few lines of torch that dequantize it.
Structure (parts present, dtypes, shapes, config agreement) is checked when the table opens, so a bad
checkpoint is one ModelDirError before any pass; `get` reads only the parts of the asked tensor.
"""
from __future__ import annotations

from pathlib import Path

import torch

from reference_engine.errors import ModelDirError
from reference_engine.files.quant.module import QuantModule, inventory
from reference_engine.files.weights import TensorInfo, TensorTable, Weights


class QuantizedWeights(TensorTable):
    """Logical name -> float32 tensor over a quantized checkpoint's stored `Weights` (`.raw`)."""

    dequantizes = True   # readers use get(), not the bytes at info.offset

    def __init__(self, raw: Weights, method: str, modules: dict[str, QuantModule], hidden: set[str]):
        self.raw, self.method, self.modules = raw, method, modules
        stored = inventory(raw).quantized            # the stored half of each module (its layout, its tensors)
        for module in modules.values():
            if module.prefix in stored:
                module.layout, module.tensors = stored[module.prefix].layout, stored[module.prefix].tensors
        self._owner = {part: m for m in modules.values() for part in m.parts.values()}
        consumed = set(self._owner) | hidden
        self._infos: dict[str, TensorInfo] = {}
        for name in raw.names:          # stored order; a module appears where its first part is stored
            if name in consumed:
                module = self._owner.get(name)
                if module is not None and module.name not in self._infos:
                    self._infos[module.name] = self._logical_info(module)
            elif name in modules:
                raise ModelDirError(raw.info(name).file, f"{name} is stored both as a float tensor and quantized "
                                                         f"({modules[name].scheme})")
            else:
                self._infos[name] = raw.info(name)
        for module in modules.values():
            self._infos.setdefault(module.name, self._logical_info(module))
        # A quantized module's bias: applied where the architecture has one (Qwen2's q/k/v), skipped where it
        # has none, as transformers and vLLM do ("skip loading extra bias for GPTQ models"): AutoGPTQ wrote
        # a zero bias on every QuantLinear (AutoGPTQ#555). The core's tensor check tolerates these names.
        self.droppable = frozenset(n for m in modules.values() if (n := m.name[: -len("weight")] + "bias") in raw)

    @classmethod
    def open(cls, root: str | Path, qconfig: dict, config_path: Path) -> QuantizedWeights:
        from reference_engine.files.quant.methods import format_modules
        raw = Weights.open(root)
        try:
            method, modules, hidden = format_modules(raw, qconfig, config_path)
        except BaseException:
            raw.close()
            raise
        return cls(raw, method, modules, hidden)

    def _logical_info(self, module: QuantModule) -> TensorInfo:
        first = self.raw.info(next(iter(module.parts.values())))
        return TensorInfo(module.name, "F32", module.shape, first.file, first.offset, self.read_bytes(module.name))

    names = property(lambda self: list(self._infos))
    files = property(lambda self: self.raw.files)
    headers = property(lambda self: self.raw.headers)
    metadata = property(lambda self: self.raw.metadata)

    def is_quantized(self, name: str) -> bool:
        return name in self.modules

    def read_bytes(self, name: str) -> int:
        """Bytes read from the files to produce `name` (every stored part of a quantized weight)."""
        module = self.modules.get(name)
        if module is None:
            return self.raw.info(name).nbytes
        return sum(self.raw.info(part).nbytes for part in module.parts.values())

    def get(self, name: str) -> torch.Tensor:
        """A quantized weight dequantized to float32 [out, in]; any other tensor as stored."""
        module = self.modules.get(name)
        if module is None:
            return self.raw.get(name)
        return self.dequantize(module, {role: self.raw.get(part) for role, part in module.parts.items()})

    def dequantize(self, module: QuantModule, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The module's weight from its parts' stored tensors (the streaming reader reads them itself)."""
        try:
            out = module.dequant(parts)
        except (ValueError, RuntimeError, IndexError) as e:
            first = self.raw.info(next(iter(module.parts.values())))
            raise ModelDirError(first.file, f"{module.name} ({module.scheme}): cannot dequantize: "
                                            f"{str(e).splitlines()[0]}") from None
        if tuple(out.shape) != module.shape:
            first = self.raw.info(next(iter(module.parts.values())))
            raise ModelDirError(first.file, f"{module.name} ({module.scheme}) dequantizes to {list(out.shape)}, "
                                            f"expected {list(module.shape)}")
        return out.float()

    def close(self) -> None:
        self.raw.close()
