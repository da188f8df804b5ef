"""Lazy, memory-mapped access to a model directory's safetensors weights (single file or sharded index).

Only headers are read when the directory is opened; a tensor's bytes are mapped when `get` asks for it,
so a 7B model can be inspected tensor by tensor without holding 14 GB in RAM.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from .config import model_dir_path, read_json
from .errors import ModelDirError

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str            # safetensors dtype string: "F32", "BF16", "F16", ...
    shape: tuple[int, ...]
    file: Path


class Weights:
    """Name -> tensor view over one or more safetensors files. Never writes, never unpickles."""

    def __init__(self, infos: dict[str, TensorInfo]):
        self._infos = infos
        self._handles: dict[Path, object] = {}

    @classmethod
    def open(cls, model_dir: str | Path) -> "Weights":
        root = model_dir_path(model_dir)
        files = weight_files(root)
        infos: dict[str, TensorInfo] = {}
        for file in files:
            for name, (dtype, shape) in read_tensor_table(file).items():
                if name in infos:
                    raise ModelDirError(file, f"tensor {name!r} also stored in {infos[name].file.name}")
                infos[name] = TensorInfo(name, dtype, shape, file)
        return cls(infos)

    @property
    def names(self) -> list[str]:
        return list(self._infos)

    @property
    def files(self) -> list[Path]:
        return sorted({info.file for info in self._infos.values()})

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def __iter__(self):
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, name: str) -> TensorInfo:
        return self._infos[name]

    def get(self, name: str) -> torch.Tensor:
        """The tensor, backed by the memory map (no copy until it is cast or moved)."""
        info = self._infos[name]
        handle = self._handles.get(info.file)
        if handle is None:
            handle = self._handles[info.file] = safe_open(str(info.file), framework="pt")
        return handle.get_tensor(name)


def weight_files(root: Path) -> list[Path]:
    """The safetensors files a directory's weights live in, from the index when there is one."""
    index = root / SAFETENSORS_INDEX
    if index.exists():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelDirError(index, "'weight_map' missing or empty")
        return [root / name for name in dict.fromkeys(weight_map.values())]
    single = root / SAFETENSORS_SINGLE
    if single.exists():
        return [single]
    others = sorted(root.glob("*.safetensors"))
    if others:
        return others
    raise ModelDirError(root, "no safetensors weights (model.safetensors or model.safetensors.index.json)")


def read_tensor_table(file: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) from one file's header."""
    try:
        with safe_open(str(file), framework="pt") as handle:
            out = {}
            for name in handle.keys():
                sl = handle.get_slice(name)
                out[name] = (sl.get_dtype(), tuple(sl.get_shape()))
            return out
    except (OSError, RuntimeError, ValueError) as e:  # safetensors raises SafetensorError(Exception)
        raise ModelDirError(file, f"unreadable safetensors file: {e}") from None
    except Exception as e:
        raise ModelDirError(file, f"unreadable safetensors file: {e}") from None
