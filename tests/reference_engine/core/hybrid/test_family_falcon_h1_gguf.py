"""Falcon-H1 from GGUF: tiny Falcon-H1 models (SmolLM2's tokenizer, which llama.cpp's converter recognises) converted
by the pinned convert_hf_to_gguf.py to F32. The converter folds every muP multiplier into the weights; read back
(ssm_a -> A_log, ssm_d, conv [C, K], the grouped norm, ffn_norm without ".weight"), the GGUF gives the safetensors
logits. A model normed before the gate (mamba_norm_before_gate) converts to a GGUF that llama.cpp runs with the norm
after the gate: the reading follows llama.cpp (its own logits, through llama-cpp-python of the same pin), not
transformers, and CFG046 says so before converting. `llmdoctor diff` of a conversion compares the source tensors
times the folded multipliers (GGUFArch.folds). ~25 s on an idle 2-core machine, ~60 s under load: two conversions of
10-30 s, one diff."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from reference_engine.core import CoreEngine
from tests.assets import or_fail, smollm2_dir
from tests.assets_gguf import convert_hf_dir
from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
from tests.reference_engine.core.tiny_models import build, random_ids


def converted(tmp_path_factory, variant: str):
    tokenizer_dir = or_fail(smollm2_dir)      # an asset that cannot be fetched fails the test: never a skip
    out = build(tmp_path_factory.mktemp(variant) / "hf", variant, tokenizer_dir=tokenizer_dir)
    return out, convert_hf_dir(out, out.parent / f"{variant}-f32.gguf")


@pytest.fixture(scope="module")
def after_gate(tmp_path_factory):
    return converted(tmp_path_factory, "falcon_h1_norm_after_gate")


@pytest.fixture(scope="module")
def before_gate(tmp_path_factory):
    return converted(tmp_path_factory, "falcon_h1_norm_before_gate")


def ids_of(n: int) -> list[int]:
    return [i * 613 % 49000 + 100 for i in random_ids(n, seed=5)]


def test_falcon_h1_gguf_logits_equal_safetensors(after_gate):
    hf_dir, gguf = after_gate
    ours, theirs = CoreEngine.from_pretrained(gguf), CoreEngine.from_pretrained(hf_dir)
    raw = ours.config.raw
    assert (raw["mamba_d_ssm"], raw["mamba_n_heads"], raw["mamba_n_groups"], raw["mamba_rms_norm"]) == (64, 4, 2, True)
    assert all(raw.get(k, 1.0) == 1.0 for k in ("embedding_multiplier", "key_multiplier", "ssm_out_multiplier"))
    ids = ids_of(60)
    full = theirs.logits(ids)
    assert (ours.logits(ids) - full).abs().max().item() <= 1e-5
    with ours.scratch() as (seq,):                               # chunked through the GGUF engine's states
        ours.prefill([seq], [ids[:25]])
        last = ours.prefill([seq], [ids[25:]])
    assert (last[0] - full[-1]).abs().max().item() <= 1e-4


def test_a_norm_before_the_gate_reads_as_llama_cpp_runs_it(before_gate):
    hf_dir, gguf = before_gate
    ours, hf = CoreEngine.from_pretrained(gguf), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.raw["mamba_norm_before_gate"] is False
    ids = ids_of(40)
    got = ours.logits(ids)
    assert (got - hf.logits(ids)).abs().max().item() > 0.1     # another model than the checkpoint
    try:
        import llama_cpp
    except ImportError as e:       # built by scripts/llama_cpp.sh, which scripts/setup.sh --test runs: never a skip
        pytest.fail(f"llama-cpp-python is not installed ({e}): run scripts/setup.sh --test")
    llm = llama_cpp.Llama(str(gguf), n_ctx=64, logits_all=True, verbose=False, n_threads=1)
    llm.eval(ids)
    theirs = torch.tensor(np.array(llm.scores[:len(ids)]))
    assert (got - theirs).abs().max().item() <= 5e-3           # ggml's own kernels: float32, other summation orders


def test_diff_of_the_conversion_sees_the_folded_multipliers_as_equal(after_gate):
    from llmdoctor.run.diff_runner import run_diff
    hf_dir, gguf = after_gate
    report = run_diff(hf_dir, gguf, quick=True, select=["DIF020", "DIF040"])
    assert [f for f in report.findings if f.severity.value != "info"] == []
    (weights,) = [f for f in report.findings if f.check == "DIF020"]
    assert weights.evidence["matched"] >= 30            # every tensor paired, in_proj's segments folded per row


def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(after_gate):
    """Each sequence's Mamba2 state apart in one prefill, beside the attention."""
    ragged_batch_equals_alone(after_gate[1], after_gate[0])


def test_check_on_the_gguf_is_clean(after_gate):
    check_is_clean(after_gate[1])
