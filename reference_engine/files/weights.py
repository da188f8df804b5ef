"""Lazy access to a model directory's safetensors weights (single file or sharded index).

Opening a directory reads and validates only the headers (reference_engine.files.safetensors_io); a tensor's
bytes are read when `get` asks for that tensor (plain reads at the validated offsets, page cache let go
after: files/reads.py), so a 7B model can be inspected tensor by tensor without holding 14 GB in RAM. Never writes,
never unpickles: pickle checkpoints are only listed by find_pickle_files.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from reference_engine.config import model_dir_path, read_json
from reference_engine.errors import ModelDirError
from reference_engine.files.reads import SAFETENSORS_DTYPES, FileHandles, read_range
from reference_engine.files.safetensors_io import Header, read_header
from reference_engine.limits import MAX_SHARDS, MAX_TENSORS, check_size

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# A pickle stream starts with PROTO (0x80) + version; torch.save files since 1.6 are zip archives.
PICKLE_MAGICS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05", b"PK\x03\x04")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str            # safetensors dtype string: "F32", "BF16", "F16", ...
    shape: tuple[int, ...]
    file: Path
    offset: int = 0       # absolute byte offset of the tensor's data in `file`
    nbytes: int = 0


class TensorTable:
    """Name -> info lookups shared by every weight source (safetensors files, a GGUF file); `_infos` is theirs."""
    _infos: dict

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def __iter__(self):
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, name: str):
        return self._infos[name]


class Weights(TensorTable):
    """Name -> tensor view over one or more validated safetensors files."""

    def __init__(self, infos: dict[str, TensorInfo], headers: dict[Path, Header] | None = None):
        self._infos = infos
        self.headers = headers or {}
        self._files = FileHandles()

    @classmethod
    def open(cls, model_dir: str | Path) -> "Weights":
        root = model_dir_path(model_dir)
        index = root / SAFETENSORS_INDEX
        if index.exists():
            shard_of = read_index(root)
            files = list(dict.fromkeys(shard_of.values()))
        else:
            shard_of, files = None, [safe_weight_path(root, name) for name in single_weight_names(root)]
        headers = {file: read_header(file) for file in files}
        infos = tensor_infos(headers)
        if shard_of is not None:
            check_weight_map(index, shard_of, infos)
        return cls(infos, headers)

    def renamed(self, names: dict[str, str], droppable: frozenset = frozenset()) -> "Weights":
        """The same tensors under new names (old -> new; unlisted names stay), reading the same bytes. droppable:
        names the engine may leave unread (a multimodal checkpoint's vision tower, files/text_decoder.py)."""
        infos = {names.get(name, name): info for name, info in self._infos.items()}
        if len(infos) != len(self._infos):
            raise ModelDirError(self.files[0], "two tensors would share one name after renaming")
        view = type(self)(infos, self.headers)
        view.droppable = frozenset(droppable)
        return view

    @property
    def names(self) -> list[str]:
        return list(self._infos)

    @property
    def files(self) -> list[Path]:
        return sorted({info.file for info in self._infos.values()} | set(self.headers))

    @property
    def metadata(self) -> dict[Path, dict[str, str]]:
        return {file: header.metadata for file, header in self.headers.items()}

    def get(self, name: str) -> torch.Tensor:
        """The tensor as a fresh CPU tensor it alone owns (only its bytes are read; files/reads.py)."""
        info = self._infos[name]
        dtype = SAFETENSORS_DTYPES.get(info.dtype)
        if dtype is None:
            raise ModelDirError(info.file, f"tensor {name!r}: dtype {info.dtype} cannot be read")
        raw = read_range(self._files.fd(info.file), info.offset, info.nbytes, info.file, f"tensor {name!r}")
        return raw.view(dtype).view(info.shape)

    def close(self) -> None:
        self._files.close()


def tensor_infos(headers: dict[Path, Header]) -> dict[str, TensorInfo]:
    infos: dict[str, TensorInfo] = {}
    for file, header in headers.items():
        for t in header.tensors.values():
            if t.name in infos:
                raise ModelDirError(file, f"tensor {t.name!r} is also stored in {infos[t.name].file.name}")
            infos[t.name] = TensorInfo(t.name, t.dtype, t.shape, file, header.data_start + t.start, t.nbytes)
    return infos


def single_weight_names(root: Path) -> list[str]:
    """Weight files of an unsharded directory: model.safetensors, else every *.safetensors."""
    if (root / SAFETENSORS_SINGLE).exists() or (root / SAFETENSORS_SINGLE).is_symlink():
        return [SAFETENSORS_SINGLE]
    others = sorted(p.name for p in root.glob("*.safetensors"))
    if others:
        return others
    pickles = find_pickle_files(root)
    if pickles:
        names = ", ".join(p.name for p in pickles[:3])
        raise ModelDirError(root, f"no safetensors weights, only pickle checkpoints ({names}) which are never "
                                  f"unpickled; convert them to safetensors")
    raise ModelDirError(root, "no safetensors weights (model.safetensors or model.safetensors.index.json)")


def read_index(root: Path) -> dict[str, Path]:
    """tensor name -> shard path from model.safetensors.index.json, every shard checked to be safe."""
    index = root / SAFETENSORS_INDEX
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelDirError(index, "'weight_map' missing or empty")
    check_size("number of tensors in weight_map", len(weight_map), MAX_TENSORS, index, minimum=None)
    named = {shard for shard in weight_map.values() if isinstance(shard, str)}
    check_size("number of shards in weight_map", len(named), MAX_SHARDS, index, minimum=None)   # before any stat
    shards: dict[str, Path] = {}
    out: dict[str, Path] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise ModelDirError(index, f"tensor {tensor!r}: shard name must be a non-empty string, found {shard!r}")
        if shard not in shards:
            shards[shard] = safe_weight_path(root, shard, index)
        out[tensor] = shards[shard]
    return out


def safe_weight_path(root: Path, name: str, referrer: Path | None = None) -> Path:
    """root/name, refusing names and symlinks that lead outside the model directory, and missing files."""
    where = referrer or root
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts or "\\" in name or "\x00" in name:
        raise ModelDirError(where, f"shard {name!r} points outside the model directory")
    path = root / rel
    try:
        exists = path.exists()
    except OSError as e:  # a hostile index: a name longer than the filesystem allows (ENAMETOOLONG)
        raise ModelDirError(where, f"shard {name[:80]!r} cannot be looked up: {e.strerror}") from None
    if not exists:
        kind = "dangling symlink" if path.is_symlink() else "missing"
        raise ModelDirError(where, f"shard {name!r} is {kind}")
    real, real_root = path.resolve(), root.resolve()
    if not (_within(real, real_root) or _within(real, hub_blobs_dir(real_root))):
        raise ModelDirError(where, f"shard {name!r} is a symlink resolving outside the model directory ({real})")
    if not real.is_file():
        raise ModelDirError(where, f"shard {name!r} is not a regular file")
    return path


def hub_blobs_dir(real_root: Path) -> Path:
    """Hugging Face hub caches keep files in <repo>/blobs and symlink them from <repo>/snapshots/<rev>/;
    those links are the one legitimate way out of a snapshot directory."""
    if real_root.parent.name == "snapshots":
        return real_root.parent.parent / "blobs"
    return real_root / ".no-blobs-dir"


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_weight_map(index: Path, shard_of: dict[str, Path], infos: dict[str, TensorInfo]) -> None:
    """The index must describe the shards exactly: every listed tensor where it says, nothing unlisted."""
    for tensor, shard in shard_of.items():
        info = infos.get(tensor)
        if info is None:
            raise ModelDirError(index, f"tensor {tensor!r} is mapped to {shard.name} but that shard does not hold it")
        if info.file != shard:
            raise ModelDirError(index, f"tensor {tensor!r} is mapped to {shard.name} but stored in {info.file.name}")
    unlisted = [name for name in infos if name not in shard_of]
    if unlisted:
        raise ModelDirError(index, f"tensor {unlisted[0]!r} in {infos[unlisted[0]].file.name} is missing from "
                                   f"weight_map ({len(unlisted)} unlisted tensors)")


def find_pickle_files(model_dir: str | Path) -> list[Path]:
    """Pickle checkpoints (*.bin, *.pt, *.pth, *.ckpt, *.pkl) in the directory. Only their first bytes are read,
    to tell a real pickle/torch.save archive apart from e.g. a raw binary; they are never unpickled."""
    root = Path(model_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())


def looks_like_pickle(path: Path) -> bool:
    """True when the file starts like a pickle stream or a torch.save zip archive (magic-bytes sniff)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return any(head.startswith(magic) for magic in PICKLE_MAGICS)
