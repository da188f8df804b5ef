"""Weights.open: lazy, validated, read-only access to single-file and sharded safetensors directories."""
from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from reference_engine.errors import ModelDirError
from reference_engine.files.weights import Weights, find_pickle_files, looks_like_pickle
from tests.conftest import snapshot_dir

INDEX = "model.safetensors.index.json"


def sharded_copy(factory_model_dir, tmp_path: Path, shards: int = 3) -> Path:
    src = factory_model_dir("llama", shards=shards)
    dst = tmp_path / "model"
    shutil.copytree(src, dst)
    return dst


def edit_index(model: Path, change) -> None:
    index = json.loads((model / INDEX).read_text())
    change(index["weight_map"])
    (model / INDEX).write_text(json.dumps(index))


def test_single_file_weights_match_the_safetensors_package(factory_model_dir):
    from safetensors.torch import load_file

    model = factory_model_dir("qwen2")
    weights = Weights.open(model)
    expected = load_file(str(model / "model.safetensors"))
    assert sorted(weights.names) == sorted(expected) and len(weights) == len(expected)
    for name, tensor in expected.items():
        info = weights.info(name)
        assert (info.dtype, info.shape, info.nbytes) == ("F32", tuple(tensor.shape), tensor.numel() * 4)
        assert torch.equal(weights.get(name), tensor)
    assert weights.files == [model / "model.safetensors"]
    assert weights.metadata[model / "model.safetensors"] == {"format": "pt"}


def test_tensor_offsets_point_at_the_tensor_bytes(factory_model_dir):
    model = factory_model_dir("llama")
    weights = Weights.open(model)
    info = weights.info("model.norm.weight")
    with open(info.file, "rb") as f:
        f.seek(info.offset)
        raw = f.read(info.nbytes)
    assert torch.equal(torch.frombuffer(bytearray(raw), dtype=torch.float32), weights.get("model.norm.weight"))


def test_sharded_directory_loads_every_tensor(factory_model_dir):
    single, sharded = Weights.open(factory_model_dir("llama")), Weights.open(factory_model_dir("llama", shards=3))
    assert len(sharded.files) == 3 and sorted(sharded.names) == sorted(single.names)
    for name in single.names:
        assert torch.equal(sharded.get(name), single.get(name))


@pytest.mark.parametrize("shard, problem", [
    ("../outside.safetensors", "points outside the model directory"),
    ("/etc/passwd", "points outside the model directory"),
    ("sub/../../x.safetensors", "points outside the model directory"),
    ("missing.safetensors", "is missing"),
])
def test_index_shard_names_cannot_escape_or_be_missing(factory_model_dir, tmp_path, shard, problem):
    model = sharded_copy(factory_model_dir, tmp_path)
    (tmp_path / "outside.safetensors").write_bytes((model / "model-00001-of-00003.safetensors").read_bytes())
    edit_index(model, lambda wm: wm.update({next(iter(wm)): shard}))
    with pytest.raises(ModelDirError, match=f"shard '{shard}' {problem}") as err:
        Weights.open(model)
    assert str(err.value).startswith(str(model / INDEX)) and "\n" not in str(err.value)


def test_symlinked_shard_resolving_outside_is_refused(factory_model_dir, tmp_path):
    model = sharded_copy(factory_model_dir, tmp_path)
    shard = model / "model-00002-of-00003.safetensors"
    outside = tmp_path / "elsewhere.safetensors"
    shutil.move(shard, outside)
    shard.symlink_to(outside)
    with pytest.raises(ModelDirError, match="symlink resolving outside the model directory"):
        Weights.open(model)


def test_hub_cache_snapshot_symlinks_into_blobs_are_allowed(factory_model_dir, tmp_path):
    """HF hub caches store <repo>/snapshots/<rev>/model.safetensors -> ../../blobs/<sha>."""
    src = factory_model_dir("llama")
    repo = tmp_path / "models--x--tiny"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for f in src.iterdir():
        shutil.copy(f, blobs / f.name)
        (snapshot / f.name).symlink_to(Path("../../blobs") / f.name)
    assert len(Weights.open(snapshot)) == len(Weights.open(src))


def test_tensor_in_two_shards_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    save_file({"a": torch.zeros(2), "b": torch.ones(2)}, str(model / "s1.safetensors"))
    save_file({"a": torch.zeros(2)}, str(model / "s2.safetensors"))
    (model / INDEX).write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}}))
    with pytest.raises(ModelDirError, match="tensor 'a' is also stored in s1.safetensors"):
        Weights.open(model)


def test_weight_map_must_agree_with_the_shard_headers(factory_model_dir, tmp_path):
    model = sharded_copy(factory_model_dir, tmp_path)
    index = json.loads((model / INDEX).read_text())["weight_map"]
    name_in_1 = next(n for n, s in index.items() if s.startswith("model-00001"))
    edit_index(model, lambda wm: wm.update({name_in_1: "model-00002-of-00003.safetensors"}))
    with pytest.raises(ModelDirError, match=f"tensor '{name_in_1}' is mapped to model-00002-of-00003.safetensors "
                                            f"but stored in model-00001-of-00003.safetensors"):
        Weights.open(model)
    edit_index(model, lambda wm: wm.pop(name_in_1))
    with pytest.raises(ModelDirError, match=f"tensor '{name_in_1}' in model-00001-of-00003.safetensors is missing "
                                            f"from weight_map"):
        Weights.open(model)
    edit_index(model, lambda wm: wm.update({"ghost.weight": "model-00001-of-00003.safetensors", name_in_1:
                                            "model-00001-of-00003.safetensors"}))
    with pytest.raises(ModelDirError, match="tensor 'ghost.weight' is mapped to model-00001-of-00003.safetensors but "
                                            "that shard does not hold it"):
        Weights.open(model)


@pytest.mark.parametrize("content, problem", [
    ("{", "invalid JSON"), ("[]", "expected a JSON object"), ('{"weight_map": {}}', "'weight_map' missing or empty"),
    ('{"weight_map": {"a": 3}}', "tensor 'a': shard name must be a non-empty string"),
])
def test_malformed_index_is_a_one_line_error(tmp_path, content, problem):
    (tmp_path / INDEX).write_text(content)
    with pytest.raises(ModelDirError, match=problem):
        Weights.open(tmp_path)


def test_truncated_weights_file_names_file_and_tensor(factory_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(factory_model_dir("llama"), model)
    path = model / "model.safetensors"
    os.truncate(path, path.stat().st_size - 10)
    with pytest.raises(ModelDirError, match=r"model\.safetensors: tensor '[^']+': data offsets .* run past the end"):
        Weights.open(model)


def test_missing_and_pickle_only_directories(tmp_path):
    with pytest.raises(ModelDirError, match="no such directory"):
        Weights.open(tmp_path / "absent")
    with pytest.raises(ModelDirError, match=r"no safetensors weights \(model.safetensors"):
        Weights.open(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(ModelDirError, match=r"only pickle checkpoints \(pytorch_model.bin\) which are never unpickled; "
                                            r"convert them to safetensors"):
        Weights.open(tmp_path)


def test_find_pickle_files_lists_without_unpickling(tmp_path):
    payload = tmp_path / "evil.pkl"
    # a pickle that would create a file if it were ever loaded
    payload.write_bytes(b"\x80\x04cos\nsystem\n(Vtouch " + str(tmp_path / "pwned").encode() + b"\ntR.")
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04rest")
    (tmp_path / "raw.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "notes.txt").write_text("hi")
    found = find_pickle_files(tmp_path)
    assert [p.name for p in found] == ["evil.pkl", "model.pt", "raw.bin"]
    assert [looks_like_pickle(p) for p in found] == [True, True, False]
    assert not (tmp_path / "pwned").exists()


def test_loading_leaves_the_directory_untouched(factory_model_dir):
    model = factory_model_dir("qwen3", shards=2)
    before = snapshot_dir(model)
    weights = Weights.open(model)
    for name in weights.names:
        weights.get(name)
    assert snapshot_dir(model) == before


def current_rss_kib() -> int:
    status = Path("/proc/self/status")
    if status.exists():
        return int(next(line for line in status.read_text().splitlines() if line.startswith("VmRSS:")).split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def sparse_shard(path: Path, tensors: dict[str, tuple[int, ...]]) -> None:
    """A valid F16 safetensors file whose data region is a hole: header written, then truncated to size."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        nbytes = 2 * shape[0] * shape[1]
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)


def test_large_sparse_sharded_model_loads_metadata_from_headers_only(tmp_path):
    """4 shards x 3 GiB of declared data: opening must touch only the headers (small allocation, small RSS)."""
    weight_map = {}
    for s in range(4):
        name = f"model-{s + 1:05d}-of-00004.safetensors"
        tensors = {f"model.layers.{s}.mlp.{p}.weight": (16384, 32768) for p in ("gate_proj", "up_proj", "down_proj")}
        sparse_shard(tmp_path / name, tensors)
        weight_map.update({t: name for t in tensors})
    (tmp_path / INDEX).write_text(json.dumps({"weight_map": weight_map}))
    declared = sum((tmp_path / f).stat().st_size for f in set(weight_map.values()))
    assert declared > 12 * 1024**3
    rss_before = current_rss_kib()
    tracemalloc.start()
    weights = Weights.open(tmp_path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    rss_growth_kib = current_rss_kib() - rss_before
    assert len(weights) == 12 and weights.info("model.layers.3.mlp.up_proj.weight").shape == (16384, 32768)
    assert peak < 1024 * 1024, f"opening allocated {peak} bytes"
    assert rss_growth_kib < 64 * 1024, f"RSS grew by {rss_growth_kib} KiB"
