"""The memory planner: sizes, resident vs streaming, refusal, layer split."""
from __future__ import annotations

import pytest
import torch

from llmdoctor.run.workloads import CHECK_FULL, CHECK_QUICK, GENERATE
from reference_engine.budget.plan import (BASE_BYTES, GiB, MiB, PlanError, default_budget, make_plan, parse_size,
                                         split_layers)
from reference_engine.testing.factory import build_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("plan") / "m", "llama", seed=0, num_hidden_layers=3)


@pytest.mark.parametrize("text, want", [("512MiB", 512 * MiB), ("4GiB", 4 * GiB), ("4G", 4 * GiB), ("4g", 4 * GiB),
                                        ("8GB", 8 * 10 ** 9), ("1.5GiB", 3 * GiB // 2), (" 100 ", 100),
                                        (123456, 123456), ("2T", 2 << 40), ("64k", 64 << 10)])
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("bad", ["", "four GiB", "4 parsecs", "-1G", "0", "1e9", "GiB", True])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="memory size"):
        parse_size(bad)


def test_resident_when_it_fits(model):
    plan = make_plan(model, 64 * GiB, workload=CHECK_FULL)
    assert plan.mode == "resident" and not plan.streaming
    assert plan.predicted_peak_bytes == plan.resident_peak_bytes <= plan.budget_bytes
    assert plan.bytes_per_pass == 0 and plan.weight_file_bytes > 0
    assert "resident" in plan.summary() and "\n" not in plan.summary()


def test_streaming_when_only_one_layer_fits(model):
    full = make_plan(model, 64 * GiB, workload=CHECK_FULL)
    budget = full.resident_peak_bytes - 1
    if full.streaming_peak_bytes > budget:        # tiny models: the fixed base dominates both modes
        budget = full.streaming_peak_bytes
        plan = make_plan(model, budget, workload=CHECK_FULL, force="streaming")
    else:
        plan = make_plan(model, budget, workload=CHECK_FULL)
    assert plan.streaming
    assert plan.bytes_per_pass >= plan.largest_layer_bytes // 4   # float32 compute of a float32 file
    assert plan.to_dict()["mode"] == "streaming"


def test_refuses_when_one_layer_does_not_fit(model):
    with pytest.raises(PlanError) as e:
        make_plan(model, 64 * MiB, workload=CHECK_QUICK)
    message = str(e.value)
    assert "needs at least" in message and "64 MiB" in message and "\n" not in message


def test_bfloat16_plans_half_the_layer(model):
    fp32 = make_plan(model, 64 * GiB, dtype=torch.float32, workload=CHECK_FULL)
    bf16 = make_plan(model, 64 * GiB, dtype=torch.bfloat16, workload=CHECK_FULL)
    assert bf16.largest_layer_bytes * 2 == fp32.largest_layer_bytes


def test_default_budget_leaves_headroom():
    budget, source = default_budget("cpu")
    assert budget >= 0 and "headroom" in source


def test_default_budget_honours_the_address_space_limit():
    """One "memory left" function (limits.memory_left): under `ulimit -v` the planner's default budget is the room
    left in the address space, as the engine's allocation guard already counted it, not MemAvailable."""
    import subprocess
    import sys
    code = ("import resource\n"
            "from reference_engine.budget.plan import default_budget\n"
            "from reference_engine.limits import meminfo_available\n"
            "room = min(2 << 30, (meminfo_available() or 4 << 30) // 2)   # well under what the host has free\n"
            "mapped = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
            "resource.setrlimit(resource.RLIMIT_AS, (mapped + room, resource.RLIM_INFINITY))\n"
            "budget, source = default_budget('cpu')\n"
            "print(budget, room, source)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    budget, room, source = done.stdout.split(" ", 2)
    assert "address-space limit" in source and "headroom" in source
    # the interpreter and torch, already mapped, count in the plan's base term: up to BASE_BYTES comes back
    assert 0 < int(budget) <= int(room) + BASE_BYTES


def test_default_budget_does_not_count_the_interpreter_twice(monkeypatch):
    """Under a cgroup cap the memory left excludes what python and torch already hold; the plan counts them again
    in its base term, so the default budget adds that part back, and a cap's headroom is small (64 MiB): a 768 MiB
    cap leaves a budget a small model can stream in, not a refusal."""
    import reference_engine.budget.plan as planner
    monkeypatch.setattr(planner, "memory_left", lambda: (520 * MiB, "cgroup memory limit"))
    monkeypatch.setattr(planner, "current_rss", lambda: 250 * MiB)
    budget, source = default_budget("cpu")
    assert budget == int((520 * MiB + BASE_BYTES) * 0.9) and source.startswith("cgroup")
    monkeypatch.setattr(planner, "memory_left", lambda: (520 * MiB, "available memory"))
    assert default_budget("cpu")[0] == 520 * MiB + BASE_BYTES - 512 * MiB   # the OS shares available memory


@pytest.mark.parametrize("layers, ranks, want", [(5, 2, [(0, 3), (3, 5)]), (5, 3, [(0, 2), (2, 4), (4, 5)]),
                                                 (4, 1, [(0, 4)]), (32, 4, [(0, 8), (8, 16), (16, 24), (24, 32)])])
def test_split_layers(layers, ranks, want):
    assert split_layers(layers, ranks) == want


def test_pipeline_rank_plans_its_own_layers(model):
    plan = make_plan(model, 64 * GiB, workload=CHECK_FULL, ranks=2, rank=1, force="streaming")
    assert plan.layers == [2, 3] and plan.ranks == 2 and "rank layers 2..2 of 2 ranks" in plan.summary()


def test_packed_decode_copy_only_for_generation_and_only_where_it_fits(model):
    """decode's packed copy (core/linear.py) doubles the projections: a check's few decode steps never get it,
    generation gets it when the budget has room, and runs resident without it when only that fits."""
    assert not make_plan(model, 64 * GiB, workload=CHECK_FULL).pack_decode
    roomy = make_plan(model, 64 * GiB, workload=GENERATE)
    assert roomy.pack_decode and roomy.mode == "resident"
    lean_peak = roomy.resident_peak_bytes - make_plan(model, 64 * GiB, workload=GENERATE.__class__(
        **{**GENERATE.__dict__, "pack_decode": False})).resident_peak_bytes
    assert lean_peak > 0                                          # the copy is in the prediction
    tight = make_plan(model, roomy.resident_peak_bytes - 1, workload=GENERATE)
    assert tight.mode == "resident" and not tight.pack_decode
    assert tight.predicted_peak_bytes == roomy.resident_peak_bytes - lean_peak


def test_engine_without_packing_decodes_from_the_plain_weights(model):
    from reference_engine.core.engine import CoreEngine
    packed, plain = CoreEngine.from_pretrained(model, num_blocks=8), CoreEngine.from_pretrained(model, num_blocks=8)
    plain.pack_decode = False
    with packed.scratch() as (a,), plain.scratch() as (b,):
        first = packed.prefill([a], [[1, 2, 3]])     # one row: gemv, whose sums follow buffer alignment
        assert (first - plain.prefill([b], [[1, 2, 3]])).abs().max() < 1e-5
        assert (packed.decode([a], [4]) - plain.decode([b], [4])).abs().max() < 1e-4
    assert plain._decode_weights is None
