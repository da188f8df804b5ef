"""A hybrid's recurrent state is counted per sequence, constant in its length, beside the KV bytes per token:
in `probe kv` (KVC901's message and evidence) and in the memory plan."""
from __future__ import annotations

from llmdoctor.run.workloads import CHECK_QUICK
from probes.kv import ModelKv, kv_findings, run_kv_probe
from probes.kv_workload import SyntheticSpec, synthetic
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.core.families import state_bytes
from reference_engine.config import load_config
from reference_engine.core.engine import CoreEngine
from tests.reference_engine.core.tiny_models import model_dir


def test_state_bytes_follow_the_layout():
    # LFM2: 3 conv layers x hidden 32 x (conv_L_cache 4 - 1) floats; Granite: 3 Mamba2 layers x
    # (conv (64 + 2*2*8) x 3 + ssm 4 x 16 x 8) floats
    assert ModelKv.from_dir(model_dir("lfm2_conv3_attn1")).state_bytes_per_sequence == 3 * 32 * 3 * 4
    granite = ModelKv.from_dir(model_dir("granite4_moe_rope"))
    assert granite.state_bytes_per_sequence == 3 * (96 * 3 + 4 * 16 * 8) * 4
    eng = CoreEngine.from_pretrained(model_dir("granite4_moe_rope"))
    assert eng.cache.states.bytes_per_sequence == granite.state_bytes_per_sequence


def test_probe_kv_reports_state_bytes():
    kv = ModelKv.from_dir(model_dir("lfm2_conv3_attn1"))
    requests = synthetic(SyntheticSpec(20, 50.0, 40, 0.5, 20, 0.5, 256, 0))
    result = run_kv_probe(requests, "synthetic: test", pool_tokens=2048, max_len=256, block_sizes=(16,),
                          bytes_per_token=kv.bytes_per_token, state_bytes_per_sequence=kv.state_bytes_per_sequence)
    occupancy = kv_findings(result)[0]
    assert occupancy.evidence["state_bytes_per_sequence"] == 1152
    assert "1152 bytes of recurrent state per running sequence" in occupancy.message


def test_memory_plan_counts_state_per_sequence():
    d = model_dir("granite4_moe_rope")
    config = load_config(d)
    per_seq = state_bytes(config, range(0, 4))
    assert per_seq == ModelKv.from_dir(d).state_bytes_per_sequence
    assert state_bytes(config, range(1, 2)) == 0                       # the attention layer keeps none
    one = make_plan(d, 64 * GiB, workload=CHECK_QUICK)
    from dataclasses import replace
    many = make_plan(d, 64 * GiB, workload=replace(CHECK_QUICK, sequences=CHECK_QUICK.sequences + 10))
    assert many.resident_peak_bytes - one.resident_peak_bytes == 10 * per_seq
