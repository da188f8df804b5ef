"""--memory-budget on the newer families: a budget between the streaming and the resident peak streams the model
one layer at a time, and what it computes equals the resident engine -- the logits, a prefill and a decode step
(a hybrid's recurrent states, MLA's latent cache) and `check`'s findings. Granite 4 (Mamba2) and Qwen3-Next
(Gated DeltaNet) hybrids, DeepSeek-V3 (MLA), gpt-oss. (20-25 s in all on the shared 2-core machine;
the first case, 14 s, pays transformers' import to build the hybrid.)"""
from __future__ import annotations

import pytest
import torch

import llmdoctor
from reference_engine.engine_builder import EngineSpec, build_engine
from llmdoctor.run.workloads import CHECK_QUICK
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.core.engine import CoreEngine
from reference_engine.testing.factory import build_model_dir
from tests.reference_engine.core.tiny_models import checkable

ENGINE = ["golden", "selftest", "numerics", "activations"]
GPT_OSS_LAYERS = ["sliding_attention", "full_attention"] * 2
FAMILIES = {
    "granite4_mamba2": lambda out: checkable(out, "granite4_moe_rope"),
    "qwen3_next_delta_net": lambda out: checkable(out, "next_moe_interval"),
    "deepseek_v3_mla": lambda out: build_model_dir(out, "deepseek_v3", num_hidden_layers=3),
    "gpt_oss": lambda out: build_model_dir(out, "gpt_oss", num_hidden_layers=4, layer_types=GPT_OSS_LAYERS),
}


def prefill_and_step(core, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefill's last logits and one greedy decode step's (the states / latents the prefill left)."""
    with core.scratch() as (seq,):
        first = core.prefill([seq], [ids])
        return first, core.decode([seq], [int(first.argmax())])


def comparable(report) -> list:
    return [(f.check, f.severity, f.message) for f in report.findings]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_budget_below_resident_streams_what_resident_computes(family, tmp_path):
    model = FAMILIES[family](tmp_path / family)
    full = make_plan(model, 64 * GiB, workload=CHECK_QUICK)
    assert full.mode == "resident" and full.streaming_peak_bytes < full.resident_peak_bytes
    budget = (full.streaming_peak_bytes + full.resident_peak_bytes) // 2        # streams, by the plan's choice
    built = build_engine(EngineSpec(model, workload=CHECK_QUICK, memory_budget=budget))
    assert built.plan.mode == "streaming" and built.engine.streaming
    resident = CoreEngine.from_pretrained(model, num_blocks=16)
    ids = list(range(5, 45))
    # the streaming core reads the head in row blocks: BLAS may take another kernel for that shape
    torch.testing.assert_close(built.engine.logits(ids), resident.logits(ids), atol=1e-5, rtol=1e-5)
    for got, want in zip(prefill_and_step(built.engine.core, ids[:20]), prefill_and_step(resident, ids[:20])):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    streamed = llmdoctor.check(model, select=ENGINE, quick=True, use_config=False, memory_budget=budget)
    held = llmdoctor.check(model, select=ENGINE, quick=True, use_config=False, memory_budget=64 * GiB)
    assert streamed.plan["mode"] == "streaming" and held.plan["mode"] == "resident"
    assert not [c.id for c in streamed.checks if c.status == "crashed"]
    assert not [f.message for f in streamed.findings if f.severity.value == "error"]
    assert comparable(streamed) == comparable(held) and [c.id for c in streamed.checks] == [c.id for c in held.checks]
    assert {c.id for c in streamed.checks if c.status == "passed"} >= {"GLD002", "ENG001"}
