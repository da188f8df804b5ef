"""--memory-budget is the host's: torchrun's local ranks split it (and their default), a forced mode refuses what
does not fit, and the KV cache follows the plan on every device."""
from __future__ import annotations

import pytest

from reference_engine.engine_builder import kv_blocks
from llmdoctor.run.workloads import CHECK_QUICK, check_workload
from reference_engine.budget import plan as planner
from reference_engine.budget.plan import GiB, MiB, PlanError, host_share, make_plan
from reference_engine.testing.factory import build_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("host") / "m", "llama", seed=0, num_hidden_layers=3)


def test_local_ranks_split_an_explicit_budget(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert host_share(4 * GiB, "cpu", 2, None) == (2 * GiB, "--memory-budget / 2 local ranks")
    assert host_share(4 * GiB, "cuda", 2, None)[0] == 2 * GiB       # the host's budget, whatever the device
    assert host_share(4 * GiB, "cpu", 1, None) == (4 * GiB, "--memory-budget")   # one process: all of it


def test_local_ranks_split_the_default_on_a_cpu_only(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr(planner, "default_budget", lambda device="cpu": (8 * GiB, "available memory"))
    assert host_share(None, "cpu", 4, None) == (2 * GiB, "available memory / 4 local ranks")
    assert host_share(None, "cuda:1", 4, None) == (8 * GiB, "available memory")   # a GPU of its own


def test_a_rank_plans_with_its_share(model, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    plan = make_plan(model, 64 * GiB, workload=CHECK_QUICK, ranks=2, rank=1, force="streaming")
    assert plan.budget_bytes == 32 * GiB and "2 local ranks" in plan.budget_source
    need = plan.streaming_peak_bytes
    with pytest.raises(PlanError, match="streaming forced"):
        make_plan(model, 2 * need - 2 * MiB, workload=CHECK_QUICK, ranks=2, rank=1, force="streaming")


def test_forced_streaming_refuses_what_does_not_fit(model):
    fits = make_plan(model, 64 * GiB, workload=CHECK_QUICK, force="streaming")
    with pytest.raises(PlanError) as e:
        make_plan(model, fits.streaming_peak_bytes - MiB, workload=CHECK_QUICK, force="streaming")
    assert "streaming forced" in str(e.value) and "\n" not in str(e.value)


def test_kv_cache_follows_the_plan_on_every_device(model):
    plan = make_plan(model, 64 * GiB, workload=CHECK_QUICK)
    assert kv_blocks(plan) == -(-CHECK_QUICK.kv_tokens // 16) + 2
    cuda = make_plan(model, 64 * GiB, workload=check_workload(True, "cuda"), device="cuda")
    assert kv_blocks(cuda) * 16 >= 2 * 32768 > kv_blocks(plan) * 16     # the far-position check's whole context
    assert kv_blocks(None) is None and kv_blocks(plan, kv_from_plan=False) is None
