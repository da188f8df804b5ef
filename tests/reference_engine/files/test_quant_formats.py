"""Quantized safetensors (GPTQ, AWQ, compressed-tensors, block FP8, bitsandbytes): every variant built by the
independent quantizers (tests/quant_builders.py) dequantizes to the oracle's weights, and the engine's fp32
logits on the quantized directory equal transformers' on the oracle's dequantized weights (a float model)."""
from __future__ import annotations

import pytest
import torch

from reference_engine.engine import Engine
from reference_engine.files.quant import QuantizedWeights
from reference_engine.source import model_source
from reference_engine.testing.factory import build_model_dir
from tests.hf_models import hf_logits, load_hf_model
from tests.quant_builders import VARIANTS, build_variant, float_copy

TOL = 1e-4
IDS = list(range(3, 60, 2))


@pytest.fixture(scope="module")
def float_dir(tmp_path_factory):
    # a wider init than the default 0.02 so logits are far from zero and quantization error is visible
    return build_model_dir(tmp_path_factory.mktemp("quant") / "float", "llama", seed=3, initializer_range=0.06)


@pytest.fixture(scope="module")
def builds(float_dir, tmp_path_factory):
    root, cache = tmp_path_factory.mktemp("variants"), {}

    def get(variant):
        if variant not in cache:
            cache[variant] = build_variant(variant, float_dir, root / variant)
        return cache[variant]
    return get


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_dequantized_weights_equal_the_oracle(variant, builds):
    build = builds(variant)
    table = model_source(build.path).open_weights()
    assert isinstance(table, QuantizedWeights) and table.method == build.config["quant_method"]
    assert sorted(table.modules) == sorted(build.quantized)
    for name in build.quantized:
        ours = table.get(name)
        assert ours.dtype == torch.float32 and ours.shape == build.dequantized[name].shape
        assert torch.allclose(ours, build.dequantized[name], rtol=0, atol=1e-7), name
        assert table.read_bytes(name) == sum(table.raw.info(p).nbytes for p in table.modules[name].parts.values())
        assert table.read_bytes(name) < ours.numel() * 4 / 1.9     # 8 bits or fewer per weight, plus scales
    # logical names only, nothing left over but AutoGPTQ's biases on linears without a bias slot (droppable)
    assert sorted(set(table.names) - table.droppable) == sorted(build.dequantized)
    table.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_equal_transformers_on_the_oracle_weights(variant, builds, float_dir, tmp_path):
    build = builds(variant)
    ours = Engine.from_pretrained(build.path).logits(IDS)
    theirs = hf_logits(load_hf_model(float_copy(build, tmp_path / "float")), IDS)
    assert ours.dtype == torch.float32 and ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= TOL
    assert theirs.abs().max() > 0.5
    # the quantization is visible (the comparison is not between two copies of the float model)
    assert (ours - Engine.from_pretrained(float_dir).logits(IDS)).abs().max().item() > 10 * TOL
