"""`probe kv`, the memory plan and the decode roofline count the cache's bytes from the family's layout
(core/cache/layout.bytes_per_token), not a dense 2 * layers * kv_heads * head_dim guess: for MLA, the latent and
the rope key per token."""
from __future__ import annotations

import dataclasses

import torch

from llmdoctor.run.workloads import CHECK_QUICK
from probes.decode_roofline import kv_bytes_read
from probes.kv import ModelKv
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.core import CoreEngine
from tests.reference_engine.core.tiny_models import model_dir

# dsv3_qlora_yarn_groups: 3 layers, kv_lora_rank 16 + qk_rope_head_dim 8 per token and layer
MLA_TOKEN_ELEMS = 3 * (16 + 8)
DENSE_GUESS_ELEMS = 2 * 3 * 4 * 8        # what the dense formula gave (4 heads, head_dim = rope dim 8)


def test_probe_kv_counts_the_latent_per_token():
    kv = ModelKv.from_dir(model_dir("dsv3_qlora_yarn_groups"), "bfloat16")
    assert kv.bytes_per_token == MLA_TOKEN_ELEMS * 2 != DENSE_GUESS_ELEMS * 2


def test_memory_plan_counts_the_latent_per_token():
    path = model_dir("dsv3_qlora_yarn_groups")
    more = dataclasses.replace(CHECK_QUICK, kv_tokens=CHECK_QUICK.kv_tokens + 1000)
    plans = [make_plan(path, 64 * GiB, workload=w, force="resident") for w in (CHECK_QUICK, more)]
    assert plans[1].resident_peak_bytes - plans[0].resident_peak_bytes == 1000 * MLA_TOKEN_ELEMS * 4


def test_roofline_reads_the_engines_own_layout():
    eng = CoreEngine.from_pretrained(model_dir("dsv3_qlora_yarn_groups"), dtype=torch.bfloat16)
    assert kv_bytes_read(eng, 100) == 100 * MLA_TOKEN_ELEMS * 2
