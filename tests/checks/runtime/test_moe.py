"""MOE checks on a dense model that declares 0 experts (Granite 4 dense: num_local_experts 0, transformers'
default num_experts_per_tok 2): skipped as a dense model, not MOE001's top-k error; the MoE variant runs them."""
from __future__ import annotations

from llmdoctor.run.runner import run_checks
from tests.reference_engine.core.tiny_models import model_dir


def test_zero_experts_is_a_dense_model_and_a_moe_granite_is_checked():
    dense = run_checks(model_dir("granite4_dense_nope_1group"), select=["MOE001"])
    assert dense.findings == [] and {c.status for c in dense.checks} == {"skipped"}
    moe = run_checks(model_dir("granite4_moe_rope"), select=["MOE001"])
    assert moe.findings == [] and {c.status for c in moe.checks} == {"passed"}
