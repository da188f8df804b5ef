"""The runner: isolation, skips, lazy resources, Problem -> Finding, statuses, timing, real checks."""
from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import checks
import llmdoctor
from checks import LoadError
from checks.catalogue.registry import Problem, Skip, check
from llmdoctor.run.fingerprint import fingerprint
from llmdoctor.run.progress import Progress
from llmdoctor.run.runner import run_checks
from reference_engine.errors import ModelDirError

from tests.llmdoctor.conftest import llama_tensors, TINY_CONFIG


def register_fakes():
    """Six fake checks exercising every way a check can end."""
    @check("ENV901", category="environment", severity="warning", hint="default hint")
    def yields_two(ctx):
        """Yields a default and an overridden problem."""
        yield Problem("default severity", evidence={"t": torch.tensor(2.5), "nan": math.nan, "p": Path("/x")})
        yield Problem("overridden", severity="info", hint="own hint", data={"plot": {"x": [0], "series": {"a": [1]}}})

    @check("ENV902", category="environment")
    def crashes(ctx):
        """Raises."""
        raise ZeroDivisionError("boom")

    @check("ENV903", category="environment")
    def skips(ctx):
        """Does not apply."""
        raise Skip("not a Qwen model")

    @check("ENV904", category="environment", needs=("weights",))
    def needs_weights(ctx):
        """Needs weights."""
        return [Problem("info only", severity="info")] if len(ctx.weights) else None

    @check("ENV905", category="environment")
    def returns_wrong_type(ctx):
        """Returns strings."""
        return ["not a problem object"]

    @check("ENV906", category="environment")
    def slow_and_clean(ctx):
        """Takes a little time."""
        time.sleep(0.02)
        assert ctx.threshold("ENV906", "limit", 1.0) == ctx.state.setdefault("expected_limit", 1.0)


def run(model_dir, **kwargs):
    return run_checks(model_dir, select=kwargs.pop("select", ["ENV9"]), **kwargs)


def test_every_outcome_is_recorded_and_a_crash_is_contained(registry_sandbox, config_only_dir):
    register_fakes()
    report = run(config_only_dir)
    status = {r.id: r.status for r in report.checks}
    assert status == {"ENV901": "failed", "ENV902": "crashed", "ENV903": "skipped", "ENV904": "skipped",
                      "ENV905": "crashed", "ENV906": "passed"}
    reason = {r.id: r.reason for r in report.checks}
    assert reason["ENV903"] == "not a Qwen model"
    assert reason["ENV904"].startswith("needs weights:") and "no safetensors weights" in reason["ENV904"]
    assert reason["ENV902"] == "ZeroDivisionError: boom"
    crash = report.findings_for("ENV902")[0]
    assert crash.severity.value == "error" and crash.message == "check crashed: ZeroDivisionError: boom"
    assert "ZeroDivisionError" in crash.evidence["traceback"] and "def crashes" not in crash.message
    assert "expected checks.catalogue.registry.Problem" in report.findings_for("ENV905")[0].message
    assert report.exit_code() == 1


def test_problem_defaults_and_jsonable_evidence(registry_sandbox, config_only_dir):
    register_fakes()
    first, second = run(config_only_dir, select=["ENV901"]).findings
    assert (first.severity.value, first.hint) == ("warning", "default hint")
    assert first.evidence == {"t": 2.5, "nan": "nan", "p": "/x"}
    assert (second.severity.value, second.hint) == ("info", "own hint")
    assert second.data == {"plot": {"x": [0], "series": {"a": [1]}}}
    json.dumps([f.as_dict() for f in (first, second)], allow_nan=False)


def test_info_only_passes_and_timing_is_measured(registry_sandbox, weights_dir):
    register_fakes()
    report = run(weights_dir, select=["ENV904", "ENV906"])
    assert [(r.id, r.status) for r in report.checks] == [("ENV904", "passed"), ("ENV906", "passed")]
    assert report.findings[0].severity.value == "info" and report.exit_code("warning") == 0
    assert report.checks[1].duration_s >= 0.02
    assert report.duration_s >= sum(r.duration_s for r in report.checks)


def test_resources_are_built_only_when_needed_and_once(registry_sandbox, weights_dir, monkeypatch):
    from reference_engine.files import weights as weights_module
    opened = []
    real_open = weights_module.Weights.open.__func__
    monkeypatch.setattr(weights_module.Weights, "open",
                        classmethod(lambda cls, d: opened.append(d) or real_open(cls, d)))

    @check("ENV907", category="environment", needs=("config",))
    def config_only(ctx):
        """Needs config only."""
        assert ctx.config.num_hidden_layers == 2

    @check("ENV908", category="environment", needs=("weights",))
    def weights_too(ctx):
        """Needs weights."""

    assert run(weights_dir, select=["ENV907"]).checks[0].status == "passed"
    assert opened == []
    register_fakes()
    run(weights_dir, select=["ENV904", "ENV907", "ENV908"])
    assert len(opened) == 1


def test_a_resource_failure_is_cached_not_retried(registry_sandbox, config_only_dir, monkeypatch):
    from reference_engine.files import weights as weights_module
    calls = []

    def broken(cls, d):
        calls.append(d)
        raise RuntimeError("mmap exploded")
    monkeypatch.setattr(weights_module.Weights, "open", classmethod(broken))
    register_fakes()

    @check("ENV909", category="environment", needs=("weights",))
    def also_weights(ctx):
        """Needs weights."""
    report = run(config_only_dir, select=["ENV904", "ENV909"])
    assert [r.status for r in report.checks] == ["failed", "failed"]      # named by id: a skip is an error
    assert report.checks[0].reason == "needs weights: RuntimeError: mmap exploded" and len(calls) == 1


def test_thresholds_reach_the_check(registry_sandbox, config_only_dir):
    register_fakes()
    ok = run(config_only_dir, select=["ENV906"], thresholds={"ENV906": {"limit": 1}})
    assert ok.checks[0].status == "passed"
    bad = run(config_only_dir, select=["ENV906"], thresholds={"ENV906": {"limit": "high"}})
    assert bad.checks[0].status == "crashed" and "ThresholdError" in bad.checks[0].reason


def test_a_broken_check_module_is_reported_not_silent(registry_sandbox, config_only_dir, monkeypatch):
    register_fakes()
    broken = LoadError("checks.system.gpu", "SyntaxError: invalid syntax (gpu.py, line 3)", "Traceback ...")
    monkeypatch.setattr(checks, "load_errors", lambda: [broken])
    report = run(config_only_dir, select=["ENV906", "gpu"])
    run_ = next(r for r in report.checks if r.id == "checks.system.gpu")
    assert run_.status == "crashed" and report.findings_for("checks.system.gpu")[0].category == "gpu"
    assert "checks.system.gpu" not in {r.id for r in run(config_only_dir, select=["ENV906"]).checks}


@pytest.mark.parametrize("make, problem", [
    (lambda tmp: tmp / "absent", "no such directory"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "not a model directory"),
    (lambda tmp: (tmp / "f.txt").write_text("x") and tmp / "f.txt", "not a model directory or GGUF file"),
])
def test_bad_paths_raise_model_dir_error(tmp_path, make, problem):
    with pytest.raises(ModelDirError, match=problem):
        run_checks(make(tmp_path))


def test_progress_only_on_a_terminal(registry_sandbox, config_only_dir):
    register_fakes()
    quiet, shown = io.StringIO(), io.StringIO()
    run(config_only_dir, select=["ENV906"], progress=Progress(0, stream=quiet))
    run(config_only_dir, select=["ENV906"], progress=Progress(0, stream=shown, enabled=True))
    assert quiet.getvalue() == ""
    assert "0/1 ENV906" in shown.getvalue() and shown.getvalue().endswith("\r")


def test_fingerprint_covers_config_and_headers_not_data(weights_dir):
    base = fingerprint(weights_dir)
    assert base.startswith("sha256:") and fingerprint(weights_dir) == base
    tensors = llama_tensors(TINY_CONFIG)
    tensors["model.norm.weight"] = tensors["model.norm.weight"] * 3  # same header, other bytes
    save_file(tensors, str(weights_dir / "model.safetensors"))
    assert fingerprint(weights_dir) == base
    tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, str(weights_dir / "model.safetensors"))
    changed = fingerprint(weights_dir)
    assert changed != base
    (weights_dir / "config.json").write_text(json.dumps(TINY_CONFIG | {"rope_theta": 1e6}))
    assert fingerprint(weights_dir) not in (base, changed)


def test_real_checks_pass_on_healthy_weights_and_catch_nan(weights_dir):
    healthy = run_checks(weights_dir, select=["WGT", "CFG"])
    # the family-specific config checks (gpt-oss, MLA, hybrids ...) skip a Llama; every other one passes
    assert healthy.checks and all(r.status in ("passed", "skipped") for r in healthy.checks), healthy.findings
    assert {"CFG001", "WGT001", "WGT006"} <= {r.id for r in healthy.checks if r.status == "passed"}
    assert [f for f in healthy.findings if f.severity.value != "info"] == []
    tensors = llama_tensors(TINY_CONFIG)
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = math.nan
    save_file(tensors, str(weights_dir / "model.safetensors"))
    broken = run_checks(weights_dir, select=["WGT"])
    nan = [f for f in broken.findings if "up_proj" in json.dumps(f.evidence) and f.severity.value == "error"]
    assert nan and broken.exit_code() == 1


def test_python_api_uses_config_file_and_arguments_win(weights_dir):
    (weights_dir / "llmdoctor.toml").write_text('select = ["CFG"]\nfail-on = "warning"\n')
    from_file = llmdoctor.check(weights_dir)
    assert {r.category for r in from_file.checks} == {"config"} and from_file.fail_on == "warning"
    overridden = llmdoctor.check(weights_dir, select="WGT001", fail_on="never")
    assert [r.id for r in overridden.checks] == ["WGT001"] and overridden.fail_on == "never"
    assert [r.id for r in llmdoctor.check(weights_dir, select=["WGT001"], use_config=False).checks] == ["WGT001"]


def test_resource_build_time_is_reported_apart_from_check_time(registry_sandbox, weights_dir, monkeypatch):
    from reference_engine.files import weights as weights_module
    real_open = weights_module.Weights.open.__func__

    def slow_open(cls, d):
        time.sleep(0.05)
        return real_open(cls, d)
    monkeypatch.setattr(weights_module.Weights, "open", classmethod(slow_open))
    register_fakes()
    report = run(weights_dir, select=["ENV904"])
    assert report.resources["weights"] >= 0.05
    assert report.checks[0].duration_s < 0.05 <= report.duration_s
