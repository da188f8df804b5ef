"""The memory planner on GGUF files: sizes from the quantized tensors (gguf's own reader is
the oracle for their bytes and element counts), streaming when the budget forces it, the one-line refusal."""
from __future__ import annotations

import re

import pytest
import torch
from gguf import GGUFReader

from reference_engine.budget.model_sizes import model_sizes
from llmdoctor.run.workloads import CHECK_FULL, CHECK_QUICK
from reference_engine.budget.plan import GiB, MiB, PlanError, make_plan
from tests.checks.zoo_gguf import F32, Q8_0, export_spec, write_spec


# wide enough that all layers resident cost more than one layer and its shadows streamed (in a narrower
# model the fixed costs dominate and streaming is never the cheaper mode)
WIDE = {"num_hidden_layers": 8, "hidden_size": 256, "intermediate_size": 1024}


@pytest.fixture(scope="module", params=[F32, Q8_0], ids=lambda q: q.name)
def gguf(request, tmp_path_factory):
    return write_spec(export_spec("llama", quant=request.param, **WIDE),
                      tmp_path_factory.mktemp("plan-gguf") / "model.gguf")


def per_layer(path, attr: str) -> list[int]:
    out: dict[int, int] = {}
    for t in GGUFReader(path).tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m:
            out[int(m.group(1))] = out.get(int(m.group(1)), 0) + int(getattr(t, attr))
    return [out[i] for i in sorted(out)]


def test_sizes_are_the_quantized_bytes_and_the_dequantized_elements(gguf):
    sizes = model_sizes(gguf)
    assert sizes.gguf and sizes.root == gguf
    assert sizes.layer_files == per_layer(gguf, "n_bytes")            # what a streaming pass reads
    assert sizes.layer_elems == per_layer(gguf, "n_elements")         # what the compute copy holds
    assert sizes.file_bytes == sum(int(t.n_bytes) for t in GGUFReader(gguf).tensors)
    plan = make_plan(gguf, 64 * GiB, workload=CHECK_FULL, force="streaming")
    assert plan.weight_file_bytes == sizes.file_bytes
    assert plan.largest_layer_bytes == max(sizes.layer_elems) * 4
    quantized = GGUFReader(gguf).tensors[0].tensor_type.name != "F32"
    assert (plan.bytes_per_pass < sum(sizes.layer_elems) * 4) == quantized   # Q8_0: ~1.06 bytes per element


def test_streaming_when_the_budget_forces_it(gguf):
    full = make_plan(gguf, 64 * GiB, workload=CHECK_QUICK)
    assert full.mode == "resident"
    assert full.streaming_peak_bytes < full.resident_peak_bytes
    plan = make_plan(gguf, full.streaming_peak_bytes, workload=CHECK_QUICK)
    assert plan.streaming and plan.predicted_peak_bytes <= plan.budget_bytes
    assert plan.bytes_per_pass == sum(per_layer(gguf, "n_bytes")) + model_sizes(gguf).head_file_bytes


def test_refuses_when_one_layer_does_not_fit(gguf):
    with pytest.raises(PlanError) as e:
        make_plan(gguf, 64 * MiB, workload=CHECK_QUICK)
    message = str(e.value)
    assert message.startswith(str(gguf)) and "needs at least" in message and "64 MiB" in message
    assert "\n" not in message


def test_bfloat16_plans_half_the_layer(gguf):
    fp32 = make_plan(gguf, 64 * GiB, dtype=torch.float32, workload=CHECK_FULL, force="streaming")
    bf16 = make_plan(gguf, 64 * GiB, dtype=torch.bfloat16, workload=CHECK_FULL, force="streaming")
    assert bf16.largest_layer_bytes * 2 == fp32.largest_layer_bytes
    assert bf16.bytes_per_pass == fp32.bytes_per_pass          # the file is what it is
