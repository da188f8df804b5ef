"""Bad quantized checkpoints: each is one line (ModelDirError naming the file and the tensor, UnsupportedError
naming the feature), never a traceback from deep inside the dequantization; the model directory is only read."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.source import model_source
from reference_engine.testing.factory import build_model_dir
from tests.quant_builders import build_variant

Q = "model.layers.0.self_attn.q_proj"


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("quant-bad")
    src = build_model_dir(root / "float", "llama", seed=4)
    return {v: build_variant(v, src, root / v).path for v in
            ("gptq_v1_b4_g32_sym", "gptq_v1_b4_g32_asym_descact", "awq_gemm_g32", "ct_w4a16_group_asym",
             "ct_nvfp4", "fp8_block_32", "bnb_nf4_dq")}


def broken(originals, tmp_path, variant, *, config=None, tensors=None):
    """A copy of a built variant with its quantization_config edited and/or its tensors edited."""
    out = tmp_path / variant
    shutil.copytree(originals[variant], out)
    if config is not None:
        data = json.loads((out / "config.json").read_text())
        config(data["quantization_config"])
        (out / "config.json").write_text(json.dumps(data))
    if tensors is not None:
        state = load_file(str(out / "model.safetensors"))
        tensors(state)
        save_file(state, str(out / "model.safetensors"))
    return out


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


def load_error(path) -> str:
    with pytest.raises(ModelDirError) as e:
        Engine.from_pretrained(path).logits([1, 2, 3])
    return one_line(e.value)


CASES = {
    # truncated packing: half of qweight's packed rows
    "gptq_truncated_qweight": ("gptq_v1_b4_g32_sym", None,
                               lambda s: s.__setitem__(f"{Q}.qweight", s[f"{Q}.qweight"][:4].clone()),
                               "q_proj"),
    "gptq_absurd_group_size": ("gptq_v1_b4_g32_sym", lambda c: c.__setitem__("group_size", 7), None, "groups"),
    "gptq_zero_group_size": ("gptq_v1_b4_g32_sym", lambda c: c.__setitem__("group_size", 0), None, "group_size"),
    "gptq_huge_group_size": ("gptq_v1_b4_g32_sym", lambda c: c.__setitem__("group_size", 1 << 40), None,
                             "group_size"),
    "gptq_bits_disagree": ("gptq_v1_b4_g32_sym", lambda c: c.__setitem__("bits", 8), None, "8-bit values"),
    "gptq_bits_string": ("gptq_v1_b4_g32_sym", lambda c: c.__setitem__("bits", "4"), None, "bits"),
    "gptq_missing_scales": ("gptq_v1_b4_g32_sym", None, lambda s: s.pop(f"{Q}.scales"), "scales"),
    "gptq_g_idx_out_of_range": ("gptq_v1_b4_g32_asym_descact", None,
                                lambda s: s[f"{Q}.g_idx"].__setitem__(0, 99), "g_idx"),
    "gptq_scales_dtype": ("gptq_v1_b4_g32_sym", None,
                          lambda s: s.__setitem__(f"{Q}.scales", s[f"{Q}.scales"].to(torch.int32)), "dtype"),
    "gptq_float_beside_quantized": ("gptq_v1_b4_g32_sym", None,
                                    lambda s: s.__setitem__(f"{Q}.weight", torch.zeros(64, 64)), "both"),
    "awq_missing_qzeros": ("awq_gemm_g32", None, lambda s: s.pop(f"{Q}.qzeros"), "qzeros"),
    "awq_group_size_disagrees": ("awq_gemm_g32", lambda c: c.__setitem__("group_size", 16), None, "expected"),
    "ct_missing_zero_point": ("ct_w4a16_group_asym", None, lambda s: s.pop(f"{Q}.weight_zero_point"),
                              "weight_zero_point"),
    "ct_truncated_packed": ("ct_w4a16_group_asym", None,
                            lambda s: s.__setitem__(f"{Q}.weight_packed", s[f"{Q}.weight_packed"][:, :3].clone()),
                            "weight_packed"),
    "ct_group_size_disagrees": ("ct_w4a16_group_asym",
                                lambda c: c["config_groups"]["group_0"]["weights"].__setitem__("group_size", 16),
                                None, "groups of 16"),
    "ct_ignored_but_quantized": ("ct_w4a16_group_asym", lambda c: c["ignore"].append(Q), None, "ignore"),
    "ct_no_group_targets": ("ct_w4a16_group_asym",
                            lambda c: c["config_groups"]["group_0"].__setitem__("targets", ["re:.*mlp.*"]), None,
                            "config_groups"),
    "nvfp4_scale_shape": ("ct_nvfp4", None,
                          lambda s: s.__setitem__(f"{Q}.weight_scale", s[f"{Q}.weight_scale"][:, :2].clone()),
                          "one scale per 16"),
    "fp8_block_size_disagrees": ("fp8_block_32", lambda c: c.__setitem__("weight_block_size", [64, 64]), None,
                                 "blocks"),
    "fp8_block_size_absurd": ("fp8_block_32", lambda c: c.__setitem__("weight_block_size", [0, -3]), None,
                              "weight_block_size"),
    "bnb_missing_absmax": ("bnb_nf4_dq", None, lambda s: s.pop(f"{Q}.weight.absmax"), "absmax"),
    "bnb_truncated_weight": ("bnb_nf4_dq", None,
                             lambda s: s.__setitem__(f"{Q}.weight", s[f"{Q}.weight"][:100].clone()), "bytes"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_checkpoint_is_one_line(case, originals, tmp_path, dir_snapshot):
    variant, config, tensors, needle = CASES[case]
    path = broken(originals, tmp_path, variant, config=config, tensors=tensors)
    before = dir_snapshot(path)
    assert needle in load_error(path)
    assert dir_snapshot(path) == before


@pytest.mark.parametrize("edit, needle", [
    (lambda c: c.__setitem__("quant_method", "hqq"), "quant_method 'hqq'"),
    (lambda c: c.__setitem__("checkpoint_format", "marlin"), "checkpoint_format 'marlin'"),
    (lambda c: c.__setitem__("bits", 5), "bits = 5"),
    (lambda c: c.__setitem__("dynamic", {"-:.*mlp.*": {}}), "dynamic"),
])
def test_unsupported_is_named(edit, needle, originals, tmp_path):
    path = broken(originals, tmp_path, "gptq_v1_b4_g32_sym", config=edit)
    with pytest.raises(UnsupportedError) as e:
        Engine.from_pretrained(path)
    assert needle in one_line(e.value)


def test_unsupported_awq_gemv_and_bnb_8bit(originals, tmp_path):
    awq = broken(originals, tmp_path, "awq_gemm_g32", config=lambda c: c.__setitem__("version", "gemv"))
    with pytest.raises(UnsupportedError, match="awq version 'gemv'"):
        Engine.from_pretrained(awq)
    bnb = broken(originals, tmp_path, "bnb_nf4_dq", config=lambda c: c.update(load_in_8bit=True, load_in_4bit=False))
    with pytest.raises(UnsupportedError, match="8-bit"):
        Engine.from_pretrained(bnb)


def test_gptq_v2_zeros_read_as_v1_are_off_by_one_step(originals, tmp_path):
    """The "!!!!" incident: the same tensors under the other checkpoint_format dequantize one scale step apart
    (what the QNT checks detect from the weights; the engine reads what the config declares)."""
    path = broken(originals, tmp_path, "gptq_v1_b4_g32_sym",
                  config=lambda c: c.__setitem__("checkpoint_format", "gptq_v2"))
    as_v1 = model_source(originals["gptq_v1_b4_g32_sym"]).open_weights()
    as_v2 = model_source(path).open_weights()
    name = f"{Q}.weight"
    scales = as_v1.raw.get(f"{Q}.scales").float()                  # [groups, out]
    step = scales.repeat_interleave(32, 0).T                        # [out, in]
    assert torch.allclose(as_v2.get(name) - as_v1.get(name), step, atol=1e-6)
