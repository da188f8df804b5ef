"""The `llmdoctor` command line through click's CliRunner: exit codes, formats, options, config, errors."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from checks.catalogue.registry import Problem, check
from llmdoctor import __version__
from llmdoctor.cli import cli


STATIC = "files,config,weights,vocab,embeddings,tokenizer"  # the engine checks have their own tests


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def model(factory_model_dir):
    return factory_model_dir("llama")


@pytest.fixture
def corrupted(model, tmp_path):
    """The factory model with its safetensors file cut short: a classic interrupted download."""
    root = shutil.copytree(model, tmp_path / "corrupted")
    weights = root / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return root


def invoke(runner, *args):
    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_version(runner):
    result = invoke(runner, "--version")
    assert result.exit_code == 0 and result.output.strip() == f"llmdoctor {__version__}"


def test_healthy_model_exits_0_with_a_table(runner, model):
    result = invoke(runner, "check", model, "--select", STATIC)
    assert result.exit_code == 0, result.output
    assert "category" in result.stdout and "files" in result.stdout and "weights" in result.stdout
    assert result.stdout.splitlines()[-1] == "PASS: nothing at or above error"
    assert "\x1b[" not in result.stdout and result.stderr == ""


def test_corrupted_model_exits_1_with_the_finding(runner, corrupted):
    result = invoke(runner, "check", corrupted, "--format", "json", "--select", STATIC)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert any(f["check"].startswith("FIL") and f["category"] == "files" for f in errors), errors
    assert report["exit_code"] == 1


@pytest.mark.parametrize("args, problem", [
    (["/nonexistent"], "/nonexistent: no such directory"),
    (["--demo", "/tmp"], "give either PATH or --demo, not both"),
    ([], "missing PATH"),
    (["{model}", "--select", "NOPE"], "unknown selector 'NOPE'"),
    (["{model}", "--baseline", "/nonexistent.json"], "baseline file not found"),
    (["{model}", "--select", "CFG", "--output", "/nonexistent/dir/r.json"], "cannot write report"),
])
def test_bad_input_is_one_line_on_stderr_and_exit_2(runner, model, args, problem):
    result = invoke(runner, "check", *[a.replace("{model}", str(model)) for a in args])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("llmdoctor: error: ")
    assert problem in result.stderr and "Traceback" not in result.stderr


def test_device_cuda_without_a_gpu_is_exit_2(runner, model, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke(runner, "check", model, "--device", "cuda")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "no CUDA device" in result.stderr


def test_a_directory_that_is_not_a_model_is_exit_2(runner, tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    result = invoke(runner, "check", tmp_path)
    assert result.exit_code == 2 and "not a model directory" in result.stderr


def _fakes(severity_by_id: dict[str, str]):
    for ident, severity in severity_by_id.items():
        def func(ctx, _severity=severity, _id=ident):
            yield Problem(f"{_id} found something", severity=_severity, evidence={"n": 1})
        func.__doc__ = f"Fake {ident}."
        func.__qualname__ = f"fake_{ident}"
        check(ident, category="environment")(func)

    @check("ENV990", category="environment")
    def crashing(ctx):
        """Fake crash."""
        raise RuntimeError("inside the check")


@pytest.mark.parametrize("select, fail_on, code", [
    ("ENV981", "error", 0), ("ENV981", "warning", 0), ("ENV981", "never", 0),        # info only
    ("ENV982", "error", 0), ("ENV982", "warning", 1), ("ENV982", "never", 0),        # a warning
    ("ENV983", "error", 1), ("ENV983", "warning", 1), ("ENV983", "never", 0),        # an error
    ("ENV990", "error", 1), ("ENV990", "never", 0),                                  # a crash is an error
])
def test_exit_code_matrix(runner, registry_sandbox, model, select, fail_on, code):
    _fakes({"ENV981": "info", "ENV982": "warning", "ENV983": "error"})
    result = invoke(runner, "check", model, "--select", select, "--fail-on", fail_on, "--format", "json")
    assert result.exit_code == code, result.output
    assert json.loads(result.stdout)["exit_code"] == code


def test_a_crashing_check_is_contained(runner, registry_sandbox, model):
    _fakes({"ENV981": "info"})
    result = invoke(runner, "check", model, "--select", "ENV9,CFG", "--format", "json")
    report = json.loads(result.stdout)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert statuses["ENV990"] == "crashed" and statuses["ENV981"] == "passed"
    # the run went on (the hybrid-only CFG checks skip on this Llama)
    assert all(statuses[i] in ("passed", "skipped") for i in statuses if i.startswith("CFG"))
    assert statuses["CFG001"] == "passed"
    crash = next(f for f in report["findings"] if f["check"] == "ENV990")
    assert "RuntimeError: inside the check" in crash["evidence"]["traceback"]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("fmt", ["table", "json", "junit", "markdown", "html"])
def test_every_format_to_a_file(runner, model, tmp_path, fmt):
    out = tmp_path / f"report.{fmt}"
    result = invoke(runner, "check", model, "--select", "CFG,FIL", "--format", fmt, "--output", out)
    assert result.exit_code == 0 and result.stdout == ""
    assert f"{fmt} report written to {out}" in result.stderr
    text = out.read_text()
    if fmt == "json":
        assert {c["id"][:3] for c in json.loads(text)["checks"]} == {"CFG", "FIL"}
    elif fmt == "junit":
        assert int(ET.fromstring(text).get("tests")) == len([c for c in ET.fromstring(text).iter("testcase")]) > 0
    elif fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and "<code>FIL001</code><" in text
    elif fmt == "markdown":
        assert text.startswith("## llmdoctor: PASS")
    else:
        assert "\x1b[" not in text and "files" in text


def test_config_file_applies_and_the_command_line_wins(runner, model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "llmdoctor.toml").write_text('select = ["CFG"]\nfail-on = "never"\n')
    from_file = json.loads(invoke(runner, "check", model, "--format", "json").stdout)
    assert {c["category"] for c in from_file["checks"]} == {"config"} and from_file["fail_on"] == "never"
    cli_wins = json.loads(invoke(runner, "check", model, "--format", "json", "--select", "FIL001",
                                 "--fail-on", "warning").stdout)
    assert [c["id"] for c in cli_wins["checks"]] == ["FIL001"] and cli_wins["fail_on"] == "warning"
    ignored = json.loads(invoke(runner, "check", model, "--format", "json", "--no-config", "--select", "FIL").stdout)
    assert ignored["fail_on"] == "error"
    (tmp_path / "llmdoctor.toml").write_text('fail-on = "sometimes"\n')
    bad = invoke(runner, "check", model)
    assert bad.exit_code == 2 and "fail-on must be one of" in bad.stderr and bad.stderr.count("\n") == 1


def test_checks_lists_the_catalogue(runner):
    table = invoke(runner, "checks")
    assert table.exit_code == 0 and "FIL001" in table.stdout and "CFG001" in table.stdout
    rows = json.loads(invoke(runner, "checks", "--format", "json", "--select", "config").stdout)
    assert rows and {r["category"] for r in rows} == {"config"}
    assert set(rows[0]) == {"id", "category", "severity", "needs", "summary", "hint"}


def test_explain(runner):
    from checks.catalogue.registry import REGISTRY
    doc = invoke(runner, "explain", "cfg001")
    assert doc.exit_code == 0 and doc.stdout.startswith("CFG001: ") and REGISTRY["CFG001"].doc[:40] in doc.stdout
    family = invoke(runner, "explain", "FIL")
    assert family.exit_code == 0 and all(line.startswith("FIL") for line in family.stdout.splitlines())
    unknown = invoke(runner, "explain", "VOC999")
    assert unknown.exit_code == 2 and "unknown check id VOC999" in unknown.stderr
    signature = invoke(runner, "explain", "RuntimeError: CUDA error: device-side assert triggered")
    assert signature.exit_code == 0 and signature.stdout.strip()
    nothing = invoke(runner, "explain", "the", "weather", "is", "nice")
    assert nothing.exit_code == 1 and "No known error signature" in nothing.stdout


def test_every_option_has_help(runner):
    from llmdoctor.cli import cli as group
    for command in group.commands.values():
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"{command.name} {param.name} has no help text"
