"""`check`'s options against each other: each pair does what both say (the evidence shows it: CTX003 read N tokens,
the plan holds N KV tokens, the drift checks ran) or is refused in one line (exit 2, no traceback). An option
given explicitly, or a check named by its id, never ends as a skip inside a passing run.

The reading model is a tiny factory Llama with a real BPE declaring 2048 positions: above what `check --quick`
alone holds in its KV cache (1024 tokens), so a plan that forgot the reading skips (untrained: CTX measures it,
never judges it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import load_file

from llmdoctor.cli import cli
from llmdoctor.run.workloads import check_workload
from reference_engine.budget.plan import GiB, make_plan
from tests.checks.long_context.test_reading import assert_inside_bounds
from tests.checks.zoo_gguf import F32, Q8_0, GGUFSpec, gguf_name, permute, write_spec
from tests.llmdoctor.run.test_memory_budget import ROOT, _port

N = 2048                                    # the reading asked for: the copy's declared maximum
QUICK_KV = check_workload(True).kv_tokens   # what --quick alone holds (1024): below N


@pytest.fixture(scope="module")
def reader(tmp_path_factory, botchan_text) -> Path:
    """The factory Llama (2 layers, hidden 64) declaring N positions, with a 2048-piece BPE trained on Botchan
    (2 s): enough ordinary word pieces for the distance prompt's five copy sequences."""
    from reference_engine.testing.factory import (BOS, SPECIAL_TOKENS, model_config, random_weights,
                                                  write_model_dir)
    from reference_engine.testing.train_bpe import LLAMA3_PATTERN, train_bpe
    tokenizer = train_bpe([botchan_text], 2048, SPECIAL_TOKENS, pattern=LLAMA3_PATTERN, bos_token=BOS)
    config = model_config("llama", tokenizer, {"max_position_embeddings": N})
    return write_model_dir(tmp_path_factory.mktemp("reader") / "model", config, tokenizer,
                           random_weights(config, 0))


@pytest.fixture(scope="module")
def reader_gguf(reader, tmp_path_factory) -> Path:
    return write_spec(demo_spec(reader), tmp_path_factory.mktemp("reader-gguf") / "reader.gguf")


@pytest.fixture(scope="module")
def reader_adapter(reader, tmp_path_factory) -> Path:
    from tests.peft_adapters import make_adapter
    adapter, _ = make_adapter(reader, tmp_path_factory.mktemp("adapter") / "lora", target_modules=["q_proj", "v_proj"])
    return adapter


@pytest.fixture(scope="module")
def golden(reader, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("golden") / "golden.json"
    done = invoke("baseline", reader, "-o", out)
    assert done.exit_code == 0, done.output
    return out


def demo_spec(model: Path) -> GGUFSpec:
    """The model as convert_hf_to_gguf.py would write it (Q8_0 matrices, Q/K rows permuted, its BPE vocabulary)."""
    config = json.loads((model / "config.json").read_text())
    tok = json.loads((model / "tokenizer.json").read_text())
    tensors = {}
    for name, w in load_file(str(model / "model.safetensors")).items():
        heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
        kind = next((k for k in heads if name.endswith(f"{k}.weight")), None)
        w = permute(w, heads[kind]) if kind else w
        tensors[gguf_name(name)] = (w.astype(np.float32), Q8_0 if w.ndim == 2 else F32)
    n, head_dim = config["vocab_size"], config["hidden_size"] // config["num_attention_heads"]
    tokens, types = [""] * n, [1] * n
    for text, i in tok["model"]["vocab"].items():
        tokens[i] = text
    for added in tok["added_tokens"]:
        tokens[added["id"]], types[added["id"]] = added["content"], 3
    from gguf import GGUFValueType

    from reference_engine.tokenizer.tokenizer import Tokenizer
    meta = {"general.name": "reader", "general.file_type": (7, GGUFValueType.UINT32),
            "llama.block_count": config["num_hidden_layers"], "llama.context_length": config["max_position_embeddings"],
            "llama.embedding_length": config["hidden_size"], "llama.feed_forward_length": config["intermediate_size"],
            "llama.attention.head_count": config["num_attention_heads"],
            "llama.attention.head_count_kv": config["num_key_value_heads"],
            "llama.rope.freq_base": float(config["rope_theta"]),
            "llama.attention.layer_norm_rms_epsilon": float(config["rms_norm_eps"]),
            "llama.rope.dimension_count": head_dim, "llama.vocab_size": n,
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY, GGUFValueType.INT32),
            "tokenizer.ggml.merges": tok["model"]["merges"],
            "tokenizer.ggml.bos_token_id": config["bos_token_id"],
            "tokenizer.ggml.eos_token_id": config["eos_token_id"],
            "tokenizer.ggml.padding_token_id": config["pad_token_id"],
            "tokenizer.ggml.add_bos_token": bool(Tokenizer.from_pretrained(model).add_bos_token)}
    return GGUFSpec("llama", meta, tensors)


def invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def report_of(result) -> dict:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return json.loads(result.stdout)


def refused(result, *needles) -> str:
    """The one line of an exit-2 refusal (no traceback), holding every needle."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmdoctor: error:"), result.stderr
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


def read_to(report: dict) -> int:
    """Tokens CTX003 read (its evidence), after checking every CTX check ran (none skipped, none crashed)."""
    status = {c["id"]: c["status"] for c in report["checks"] if c["id"].startswith("CTX")}
    assert status and set(status.values()) <= {"passed", "failed"}, report["checks"]
    assert not [f for f in report["findings"] if f["check"].startswith("CTX") and f["severity"] != "info"]
    return next(f for f in report["findings"] if f["check"] == "CTX003")["evidence"]["tokens"]


def assert_read_n(report: dict, n: int = N) -> None:
    assert n - 140 < read_to(report) <= n               # the prompt fills N but for its last pair's tail
    assert report["plan"]["kv_tokens"] >= n > QUICK_KV
    assert f"reading {n} tokens" in report["plan"]["workload"]


def streaming_budget(model) -> int:
    """A budget under the resident peak of `check --quick` with the reading: the run must stream."""
    return make_plan(model, 64 * GiB, workload=check_workload(True, "cpu", N, 2048)).streaming_peak_bytes


# ---- --quick x --context, on every path: resident, streaming under a budget, a GGUF, an adapter ------------

def test_quick_context_reads_n_resident(reader):
    """The user's command on a small model: every quick check, the CTX run reading N (it skipped before, the
    plan's KV cache holding the quick probes' 1024 tokens), exit 0."""
    report = report_of(invoke("check", reader, "--quick", "--context", N, "--format", "json", "--no-config"))
    assert_read_n(report)
    assert report["plan"]["mode"] == "resident" and not any(f["severity"] == "error" for f in report["findings"])


def test_quick_context_under_memory_budget_streams_and_reads_n(reader):
    budget = streaming_budget(reader)
    done = invoke("check", reader, "--quick", "--context", N, "--select", "CTX", "--memory-budget", budget,
                  "--format", "json", "--no-config")
    report = report_of(done)
    assert report["plan"]["mode"] == "streaming" and report["plan"]["budget_bytes"] == budget
    assert_read_n(report)
    assert report["plan"]["actual"]["passes"] >= 2              # one pass over the weights per chunk


def test_quick_context_on_a_gguf_reads_n(reader_gguf):
    report = report_of(invoke("check", reader_gguf, "--quick", "--context", N, "--select", "CTX", "--format",
                              "json", "--no-config"))
    assert_read_n(report)


def test_quick_context_on_an_adapter_reads_n(reader, reader_adapter):
    report = report_of(invoke("check", reader_adapter, "--base", reader, "--quick", "--context", N, "--select",
                              "CTX,LRA", "--format", "json", "--no-config"))
    assert_read_n(report)
    assert {c["id"]: c["status"] for c in report["checks"]}["LRA002"] == "passed"


def test_torchrun_quick_context_reads_n(reader):
    """Two ranks, each holding half the layers and the N tokens' KV for them: rank 0 reports the reading."""
    args = ["check", str(reader), "--quick", "--context", str(N), "--select", "CTX003", "--format", "json",
            "--no-config"]
    env = {**os.environ, "LLMDOCTOR_DIST_TIMEOUT": "60", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(_port()), "-m", "llmdoctor", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["plan"]["ranks"] == 2
    assert_read_n(report)


# ---- --context against what it cannot have: refused in one line, before loading -----------------------------

def test_context_beyond_the_declared_positions_is_refused(reader, reader_gguf):
    refused(invoke("check", reader, "--context", 2 * N), f"--context {2 * N}", f"the {N} positions the model declares")
    refused(invoke("check", reader_gguf, "--quick", "--context", 2 * N), f"--context {2 * N}")


@pytest.mark.parametrize("narrowing", [["--select", "TOK"], ["--ignore", "CTX"], ["--ignore", "context"]])
def test_context_with_no_ctx_check_selected_is_refused(reader, narrowing):
    refused(invoke("check", reader, "--context", 1024, *narrowing), "--context 1024", "CTX checks")


def test_context_beyond_the_memory_budget_is_refused_naming_it(reader):
    """A budget the quick check fits, but not with N tokens of KV cache and the reading's chunk: refused, the
    line names the budget and the tokens the reading needs (it used to run and skip the CTX checks)."""
    quick = make_plan(reader, 64 * GiB, workload=check_workload(True), force="streaming").streaming_peak_bytes
    reading = make_plan(reader, 64 * GiB, workload=check_workload(True, "cpu", N, 2048),
                        force="streaming").streaming_peak_bytes
    assert reading > quick
    budget = (quick + reading) // 2
    line = refused(invoke("check", reader, "--quick", "--context", N, "--memory-budget", budget),
                   f"{N} KV tokens for check --quick, reading {N} tokens", "the memory budget is")
    assert "--memory-budget" in line


# ---- --select: a check named by its id runs or fails; --quick does not skip what was named -----------------

def test_ctx_named_under_quick_runs_at_the_default_context(reader):
    report = report_of(invoke("check", reader, "--quick", "--select", "CTX003", "--format", "json", "--no-config"))
    assert_read_n(report)                                   # min(declared 2048, 4096)


def test_quick_without_context_skips_ctx_quietly_when_not_asked(reader):
    """Not asked for (ALL): --quick leaves the reading out, and the plan does not count it."""
    from findings import CATEGORIES
    ignore = ",".join(c for c in CATEGORIES if c != "context")
    report = report_of(invoke("check", reader, "--quick", "--ignore", ignore, "--format", "json", "--no-config"))
    status = {c["id"]: (c["status"], c["reason"]) for c in report["checks"] if c["id"].startswith("CTX")}
    assert status and all(s == "skipped" and "--quick skips" in r for s, r in status.values())
    assert report["plan"] is None or report["plan"]["kv_tokens"] == QUICK_KV


def test_a_named_check_that_skips_fails_the_run(reader):
    named = invoke("check", reader, "--select", "DRF001", "--format", "json", "--no-config")
    assert named.exit_code == 1
    error = next(f for f in report_of(named)["findings"] if f["check"] == "DRF001")
    assert error["severity"] == "error" and "--select names it" in error["message"] and "--baseline" in error["message"]
    family = invoke("check", reader, "--select", "DRF", "--format", "json", "--no-config")   # a prefix: may skip
    assert family.exit_code == 0 and {c["status"] for c in report_of(family)["checks"]} == {"skipped"}


def test_a_named_check_quick_trims_fails_the_run(reader):
    """GEN004 needs a full check's decode budget: named under --quick it says so as an error, not a quiet skip."""
    done = invoke("check", reader, "--quick", "--select", "GEN004", "--format", "json", "--no-config")
    assert done.exit_code == 1
    (error,) = report_of(done)["findings"]
    assert error["check"] == "GEN004" and "--select names it: --quick" in error["message"]


def test_base_without_an_adapter_is_refused(reader):
    refused(invoke("check", reader, "--base", reader, "--quick"), "--base is for a LoRA adapter directory")


def test_ctx_that_cannot_read_under_context_is_an_error(factory_model_dir):
    """The factory tokenizer has too few word pieces for the distance prompt: --context N was asked and cannot be
    read, so each CTX check fails with the reason instead of skipping inside a passing run."""
    model = factory_model_dir("llama")
    done = invoke("check", model, "--context", 256, "--select", "CTX", "--format", "json", "--no-config")
    assert done.exit_code == 1
    errors = [f for f in report_of(done)["findings"] if f["severity"] == "error"]
    assert {f["check"] for f in errors} == {"CTX001", "CTX002", "CTX003"}
    assert all("--context 256 was given" in f["message"] and "distance prompt" in f["message"] for f in errors)


# ---- --baseline against --select/--ignore and --quick ----------------------------------------------------------

def test_baseline_with_drift_checks_left_out_is_refused(reader, tmp_path):
    golden = tmp_path / "golden.json"
    golden.write_text("{}")
    refused(invoke("check", reader, "--baseline", golden, "--ignore", "DRF"), "--baseline", "DRF checks")
    refused(invoke("check", reader, "--baseline", golden, "--select", "CTX003", "--context", 512), "DRF checks")


def test_baseline_with_quick_and_context_runs_both(reader, golden):
    report = report_of(invoke("check", reader, "--quick", "--baseline", golden, "--context", N, "--select",
                              "DRF,CTX", "--format", "json", "--no-config"))
    status = {c["id"]: c["status"] for c in report["checks"]}
    assert status["DRF001"] == status["DRF002"] == "passed"
    assert_read_n(report)


def test_unreadable_baseline_is_an_error_not_a_skip(reader, tmp_path):
    broken = tmp_path / "golden.json"
    broken.write_text("not json")
    done = invoke("check", reader, "--baseline", broken, "--select", "DRF", "--format", "json", "--no-config")
    assert done.exit_code == 1
    errors = {f["check"] for f in report_of(done)["findings"] if f["severity"] == "error"}
    assert {"DRF001", "DRF002"} <= errors


# ---- the user's command on a real model -------------------------------------------------------------------------

def test_smollm2_quick_context_4096_reads_4096(smollm2_dir):
    """`llmdoctor check SmolLM2-135M --quick --context 4096`: CTX003 read ~4096 tokens (it skipped, "the KV cache
    has room for 1056 tokens, the prompt needs 4088", and the run passed), and the healthy model reads every
    distance inside both bounds at the default reading (the suite's one 4096-token reading of a real model)."""
    done = invoke("check", smollm2_dir, "--quick", "--context", 4096, "--format", "json", "--no-config")
    report = report_of(done)
    assert_read_n(report, 4096)
    ctx = [f"{f['check']}:{f['severity']}" for f in report["findings"] if f["check"].startswith("CTX")]
    assert ctx == ["CTX003:info"]
    assert_inside_bounds(next(f["evidence"] for f in report["findings"] if f["check"] == "CTX003"), 3900)
