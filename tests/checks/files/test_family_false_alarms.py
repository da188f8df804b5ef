"""Two false alarms on healthy models of the newer families, and the faults those checks must still catch:
- the longrope factor lists (CFG003, CFG060) hold one factor per rotary pair, rotary_dim / 2 with
  partial_rotary_factor applied (Phi-4-mini: 48 of head_dim 128), read by the one helper the rope table uses;
  a GGUF's rope_freqs (GGF007) likewise, rope.dimension_count / 2;
- zero-centred norms (Gemma, Qwen3-Next: `(1 + w) * norm(x)`) are all zeros in a model saved at its
  initialisation, a gain of one (WGT006 silent); -1 everywhere there, or a zeroed plain weight, still fires; in a
  Gemma 3 multimodal checkpoint too (the decoder's norms under their stored names, and the projector's own)."""
from __future__ import annotations

import functools
import shutil

import numpy as np
import pytest
import torch

from llmdoctor.run.runner import run_checks
from reference_engine.testing.factory import build_model_dir
from tests.checks import zoo

# phi3 preset: head_dim 64 / 4 = 16; partial_rotary_factor 0.75 rotates 12 dims, 6 pairs (head_dim / 2 is 8)
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 256}


def longrope(factors: int, in_block: bool):
    block = {**LONGROPE, "short_factor": [1.0] * factors, "long_factor": [1.5] * factors}
    if in_block:                     # transformers 5 writes the factor inside rope_parameters
        return zoo.edit_json("config.json", rope_scaling=None, max_position_embeddings=1024,
                             rope_parameters={**block, "partial_rotary_factor": 0.75})
    return zoo.edit_json("config.json", rope_scaling=block, max_position_embeddings=1024, partial_rotary_factor=0.75)


@pytest.mark.parametrize("factors, in_block, fires", [(6, False, False), (6, True, False), (8, False, True),
                                                      (8, True, True)])
def test_longrope_lists_are_rotary_dim_over_two(factory_model_dir, tmp_path, factors, in_block, fires):
    d = shutil.copytree(factory_model_dir("phi3"), tmp_path / "m")
    longrope(factors, in_block)(d)
    report = run_checks(d, select=["CFG003", "CFG060"])
    found = sorted((f.check, f.severity.value) for f in report.findings)
    assert found == ([("CFG003", "error"), ("CFG003", "error"), ("CFG060", "warning"), ("CFG060", "warning")]
                     if fires else []), [f.message for f in report.findings]
    assert all("6" in f.message for f in report.findings)          # the width it names is the rotary one


@pytest.mark.parametrize("rotary, freqs, fires", [(12, 6, False), (12, 8, True), (None, 8, False)])
def test_gguf_rope_freqs_are_rotary_dim_over_two(tmp_path, rotary, freqs, fires):
    """GGF007 reads the rotary width from rope.dimension_count (llama.cpp's n_rot), head_dim without it."""
    from tests.checks.zoo_gguf import DROP, F32, write_variant
    meta = {"llama.rope.dimension_count": DROP if rotary is None else rotary}
    path = write_variant(tmp_path, "m.gguf", metadata=meta,
                         tensors={"rope_freqs.weight": (np.ones(freqs, np.float32), F32)})
    report = run_checks(path, select=["GGF007"])
    assert [f.check for f in report.findings] == (["GGF007"] if fires else []), [f.message for f in report.findings]


@functools.cache
def at_init(family: str, root) -> str:
    """A model as transformers saves it at initialisation: its zero-centred norms all zeros."""
    out = root / family
    if family == "gemma3":              # the factory's Gemma with transformers' init of the norm offsets
        build_model_dir(out, "gemma3")

        def zero_norms(t, d):
            for name in t:
                if name.endswith("norm.weight"):
                    t[name] = torch.zeros_like(t[name])
        zoo.edit_tensors(zero_norms)(out)
    elif family == "gemma3_wrapper":    # Gemma3ForConditionalGeneration: decoder and projector norms zero-centred
        from tests.reference_engine.core.dense.test_multimodal_text import build
        build(out, "gemma3", at_init=True)
    else:
        import transformers
        from tests.reference_engine.core.tiny_families import DELTA_NET
        _, _, overrides = DELTA_NET.variants["next_moe_interval"]
        torch.manual_seed(0)
        config = transformers.Qwen3NextConfig(**{**DELTA_NET.base, **overrides})
        transformers.Qwen3NextForCausalLM(config).save_pretrained(out)
    return out


WRAPPED = "language_model.model."                                     # the decoder's prefix as transformers saves it
PROJECTOR_NORM = "multi_modal_projector.mm_soft_emb_norm.weight"


def fill(name: str, value: float):
    def change(t, d):
        t[name] = torch.full_like(t[name], value)
    return zoo.edit_tensors(change)


@pytest.mark.parametrize("family, fault, tensor", [
    ("gemma3", None, None),
    ("qwen3_next", None, None),
    ("gemma3", fill("model.layers.1.self_attn.o_proj.weight", 0.0), "model.layers.1.self_attn.o_proj.weight"),
    ("gemma3", fill("model.layers.0.input_layernorm.weight", -1.0), "model.layers.0.input_layernorm.weight"),
    ("qwen3_next", fill("model.norm.weight", -1.0), "model.norm.weight"),
    # the DeltaNet's gated output norm is a plain gain (ones at init): zeros there are the fault
    ("qwen3_next", fill("model.layers.0.linear_attn.norm.weight", 0.0), "model.layers.0.linear_attn.norm.weight"),
    # the multimodal wrapper: its decoder's tensors are read under causal-LM names, named as the file stores them
    ("gemma3_wrapper", None, None),
    ("gemma3_wrapper", fill(WRAPPED + "layers.0.input_layernorm.weight", -1.0),
     WRAPPED + "layers.0.input_layernorm.weight"),
    ("gemma3_wrapper", fill(PROJECTOR_NORM, -1.0), PROJECTOR_NORM),
    ("gemma3_wrapper", fill(WRAPPED + "layers.1.self_attn.o_proj.weight", 0.0),
     WRAPPED + "layers.1.self_attn.o_proj.weight"),
], ids=["gemma3-healthy", "qwen3_next-healthy", "gemma3-zero-o_proj", "gemma3-offset-minus-one",
        "qwen3_next-final-norm-minus-one", "qwen3_next-zero-gated-norm", "gemma3_wrapper-healthy",
        "gemma3_wrapper-offset-minus-one", "gemma3_wrapper-projector-norm-minus-one", "gemma3_wrapper-zero-o_proj"])
def test_zero_centred_norms_at_init_are_healthy(family, fault, tensor, tmp_path_factory):
    root = tmp_path_factory.getbasetemp()
    model = at_init(family, root)
    if fault is not None:
        model = shutil.copytree(model, tmp_path_factory.mktemp("fault") / "m")
        fault(model)
    report = run_checks(model, select=["WGT006"])
    assert [r.status for r in report.checks] == ["passed" if fault is None else "failed"]
    assert [f.evidence["tensor"] for f in report.findings] == ([] if tensor is None else [tensor])
