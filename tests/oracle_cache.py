"""What an oracle (transformers) answered on the same bytes, kept in the asset cache so that a warm suite asks it once.

Many tests compare the engine with transformers on files that are the same from run to run: the fetched GGUFs and
checkpoints, and the broken copies the tests build from them the same way every time. Asking transformers often
costs more than the engine's own run (Gemma 3 270M's Q4_K_M GGUF: gguf-py dequantizes it in numpy, then a 262k-row
head runs in float32). Its answer depends only on the inputs' bytes, the question and the oracle's version, so it is
kept under exactly that key: sha256 over the question's name and parameters, the versions of transformers,
tokenizers, torch and gguf, and every input file's sha256. A new transformers, one changed byte or another
parameter asks again; the engine's side is always computed afresh, so every comparison still runs.
LLMDOCTOR_ORACLE_CACHE=0 asks every time. Answers are stored as safetensors (tensors) and JSON (the rest):
nothing is unpickled.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

import torch

from tests.assets import _locked, cache_root

VERSION = 1                                             # bump when what is stored changes shape
PACKAGES = ("transformers", "tokenizers", "torch", "gguf")
_DIGESTS: dict[tuple, str] = {}                         # (path, size, mtime) -> sha256, for this process


def file_digest(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def inputs_digest(inputs: list[Path]) -> list[tuple[str, str]]:
    """(name, sha256) of every input file, a directory's files by their relative names."""
    out = []
    for root in map(Path, inputs):
        files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
            if root.is_dir() else [root]
        out += [(p.relative_to(root).as_posix() if root.is_dir() else p.name, file_digest(p)) for p in files]
    return out


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def key_digest(question: str, inputs: list[Path], params: dict) -> str:
    key = json.dumps([VERSION, question, params, versions(), inputs_digest(inputs)], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def disabled() -> bool:
    return os.environ.get("LLMDOCTOR_ORACLE_CACHE") == "0"


def answer(question: str, inputs: list[Path], params: dict, ask: Callable[[], dict]) -> dict:
    """ask() -> {name: tensor or JSON value}, from the cache when the same question was asked on the same bytes
    by the same oracle versions."""
    if disabled():
        return ask()
    digest = key_digest(question, inputs, params)
    root = cache_root() / "oracle"
    root.mkdir(exist_ok=True)
    tensors_file, values_file = root / f"{question}-{digest}.safetensors", root / f"{question}-{digest}.json"
    with _locked(f"oracle-{digest}"):
        if values_file.is_file():
            return _load(tensors_file, values_file)
        result = ask()
        _store(result, tensors_file, values_file)
        return result


def file_answer(question: str, inputs: list[Path], params: dict, outfile: Path, make: Callable[[], None]) -> Path:
    """make() writes `outfile` (a converter's output file); a copy of it is kept, and given again (copied: a test
    may edit its file) when the same inputs, parameters and versions come back."""
    if disabled():
        make()
        return outfile
    digest = key_digest(question, inputs, params)
    root = cache_root() / "oracle"
    root.mkdir(exist_ok=True)
    kept = root / f"{question}-{digest}{outfile.suffix}"
    with _locked(f"oracle-{digest}"):
        if kept.is_file():
            shutil.copyfile(kept, outfile)
            return outfile
        make()
        tmp = kept.with_suffix(".part")
        shutil.copyfile(outfile, tmp)
        os.replace(tmp, kept)
    return outfile


def _load(tensors_file: Path, values_file: Path) -> dict:
    from safetensors.torch import load_file
    values = json.loads(values_file.read_text())
    return {**values, **(load_file(tensors_file) if tensors_file.is_file() else {})}


def _store(result: dict, tensors_file: Path, values_file: Path) -> None:
    from safetensors.torch import save_file
    tensors = {k: v.detach().contiguous() for k, v in result.items() if isinstance(v, torch.Tensor)}
    values = {k: v for k, v in result.items() if not isinstance(v, torch.Tensor)}
    if tensors:
        tmp = tensors_file.with_suffix(".part")
        save_file(tensors, tmp)
        os.replace(tmp, tensors_file)
    tmp = values_file.with_suffix(".part")
    tmp.write_text(json.dumps(values))
    os.replace(tmp, values_file)          # last: its presence means the answer is whole
