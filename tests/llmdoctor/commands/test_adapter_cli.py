"""The CLI and Python API with a LoRA adapter: check / generate / baseline ADAPTER --base BASE, the base taken from
base_model_name_or_path when local, one-line exit 2 otherwise, -o refused into either directory, a pickle-only
adapter refused without being opened, and a real SmolLM2 adapter checked without adapter errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import llmdoctor
from reference_engine.engine import Engine
from reference_engine.testing.factory import build_model_dir
from tests.peft_adapters import make_adapter

import peft  # noqa: E402,F401  (the oracle: scripts/setup.sh --test installs it; never a skip)
STATIC_ONLY = "golden,numerics,kv_cache,selftest,generation"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    base = build_model_dir(root / "base", "llama", seed=0, num_hidden_layers=2)
    adapter, _ = make_adapter(base, root / "adapter", target_modules=["q_proj", "v_proj"])
    return root, base, adapter


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "llmdoctor", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_check_adapter_with_base_runs_every_check_kind(made, dir_snapshot):
    root, base, adapter = made
    before = (dir_snapshot(base), dir_snapshot(adapter))
    out = cli("check", adapter, "--base", base, "--quick", "--format", "json", "--select", "LRA,ACT,WGT001")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status["LRA002"] == "passed" and status["ACT001"] == "passed" and status["WGT001"] == "passed"
    assert (dir_snapshot(base), dir_snapshot(adapter)) == before


def test_base_from_adapter_config_when_local(made):
    root, base, adapter = made        # peft recorded the local base path in base_model_name_or_path
    report = llmdoctor.check(adapter, select=["LRA"], use_config=False)
    assert {c.status for c in report.checks} <= {"passed", "skipped"} and report.exit_code() == 0
    assert "LoRA on" in report.model


def test_hub_base_needs_base_option(made, tmp_path):
    root, base, adapter = made
    hub = tmp_path / "hub_adapter"
    hub.mkdir()
    for f in adapter.iterdir():
        (hub / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((hub / "adapter_config.json").read_text())
    (hub / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "meta-llama/X"}))
    out = cli("check", hub)
    assert out.returncode == 2 and "pass --base" in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("inside", ["adapter", "base"])
def test_output_into_adapter_or_base_refused(made, inside):
    root, base, adapter = made
    target = (adapter if inside == "adapter" else base) / "report.json"
    out = cli("check", adapter, "--base", base, "--select", "LRA001", "-o", target)
    assert out.returncode == 2 and "never writes into a model" in out.stderr
    assert not target.exists()
    out = cli("baseline", adapter, "--base", base, "-o", target)
    assert out.returncode == 2 and not target.exists()


def test_pickle_only_adapter_is_refused_unopened(made, tmp_path):
    root, base, adapter = made
    bad = tmp_path / "pickled"
    bad.mkdir()
    (bad / "adapter_config.json").write_text((adapter / "adapter_config.json").read_text())
    (bad / "adapter_model.bin").write_bytes(b"\x80\x04not a real pickle")
    with pytest.raises(Exception) as e:
        Engine.from_pretrained(base, adapter=bad)
    assert "never unpickled" in str(e.value)
    out = cli("check", bad, "--base", base, "--select", "LRA", "--format", "json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert any(f["check"] == "LRA001" and "never unpickled" in f["message"] for f in json.loads(out.stdout)["findings"])


def test_generate_with_adapter(made):
    root, base, adapter = made
    out = cli("generate", adapter, "--base", base, "Hello", "--max-new-tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["token_ids"]) >= 1


@pytest.mark.assets
def test_smollm2_adapter_passes_check(smollm2_dir, tmp_path):
    adapter, _ = make_adapter(smollm2_dir, tmp_path / "smol_lora", r=8, lora_alpha=16,
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], seed=3)
    out = cli("check", adapter, "--base", smollm2_dir, "--quick", "--ignore", STATIC_ONLY, "--format", "json",
              timeout=600)
    report = json.loads(out.stdout)
    lra = [f for f in report["findings"] if f["check"].startswith("LRA") and f["severity"] != "info"]
    assert lra == []
    assert not [c for c in report["checks"] if c["status"] == "crashed"]
    assert {c["id"]: c["status"] for c in report["checks"]}["ACT001"] == "passed"


def test_baseline_of_adapted_model(made, tmp_path):
    root, base, adapter = made
    out_file = tmp_path / "adapted.json"
    out = cli("baseline", adapter, "--base", base, "--quick", "-o", out_file)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out_file.read_text())
    assert doc["adapter"] == str(adapter) and doc["probes"]
