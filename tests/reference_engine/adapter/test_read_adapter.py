"""read_adapter and AdaptedWeights on malformed or unsupported adapters: one-line ModelDirError naming the file,
never a traceback, never an unpickle; and a GGUF base takes the same adapter as its safetensors twin."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from reference_engine.adapter import AdaptedWeights, read_adapter
from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError
from reference_engine.files.weights import Weights
from reference_engine.testing.factory import build_model_dir
from tests.peft_adapters import make_adapter

import peft  # noqa: E402,F401  (the oracle: scripts/setup.sh --test installs it; never a skip)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("read")
    base = build_model_dir(root / "base", "llama", seed=0)
    adapter, _ = make_adapter(base, root / "adapter", target_modules=["q_proj", "v_proj"], use_dora=True)
    return base, adapter


def broken_copy(adapter, tmp_path, edit):
    out = tmp_path / "broken"
    shutil.copytree(adapter, out)
    edit(out)
    return out


def config_edit(**kv):
    def edit(d):
        cfg = json.loads((d / "adapter_config.json").read_text())
        cfg.update(kv)
        (d / "adapter_config.json").write_text(json.dumps(cfg))
    return edit


def test_reads_modules_without_reading_tensors(made):
    base, adapter = made
    a = read_adapter(adapter)
    q = a.modules["model.layers.0.self_attn.q_proj"]
    assert set(q.keys) == {"A", "B", "magnitude"} and q.layer == 0 and a.rank_in_tensors(q) == 4
    assert a.config.use_dora and a.config.scale_of(q.name) == 2.0 and a.unknown == []


@pytest.mark.parametrize("edit,words", [
    (lambda d: (d / "adapter_config.json").write_text("{not json"), "invalid JSON"),
    (config_edit(r="four"), "'r' must be a positive integer"),
    (config_edit(lora_alpha=[1]), "'lora_alpha' must be a number"),
    (config_edit(target_modules=[1, 2]), "'target_modules' must be a list"),
    (config_edit(rank_pattern={"q_proj": -1}), "'rank_pattern'"),
    (config_edit(peft_type="IA3"), "only LoRA adapters"),
    (config_edit(alora_invocation_tokens=[5]), "activated LoRA"),
    (config_edit(lora_bias=True), "bias"),
    (config_edit(layer_replication=[[0, 1]]), "layer replication"),
    (lambda d: (d / "adapter_model.safetensors").write_bytes(b"\x10\x00"), "adapter_model.safetensors"),
    (lambda d: (d / "adapter_model.safetensors").unlink(), "no adapter_model.safetensors"),
    (lambda d: ((d / "adapter_model.safetensors").rename(d / "adapter_model.bin")), "never unpickled"),
])
def test_malformed_adapter_one_line(made, tmp_path, edit, words):
    base, adapter = made
    bad = broken_copy(adapter, tmp_path, edit)
    with pytest.raises(ModelDirError) as e:
        Engine.from_pretrained(base, adapter=bad)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unmergeable_module_refused_before_reading(made, tmp_path):
    base, adapter = made
    from safetensors.torch import load_file, save_file

    def drop_a(d):
        t = load_file(d / "adapter_model.safetensors")
        del t["base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"]
        save_file(t, d / "adapter_model.safetensors")
    bad = broken_copy(adapter, tmp_path, drop_a)
    with pytest.raises(ModelDirError, match="v_proj: lora_B without its lora_A"):
        AdaptedWeights(Weights.open(base), read_adapter(bad))


def test_gguf_base_takes_the_same_adapter(made, tmp_path):
    from tests.checks.zoo_gguf import F32, export_spec, write_spec
    base, adapter = made
    gguf = write_spec(export_spec("llama", seed=0, quant=F32), tmp_path / "base.gguf")
    ids = [1, 40, 77, 300, 12]
    from_hf = Engine.from_pretrained(base, adapter=adapter).logits(ids)
    from_gguf = Engine.from_pretrained(gguf, adapter=adapter).logits(ids)
    assert torch.allclose(from_hf, from_gguf, atol=1e-4), float((from_hf - from_gguf).abs().max())
