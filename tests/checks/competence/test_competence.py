"""The competence family: broken copies of SmolLM2 that transformers shows talking nonsense are
caught by CMP001/CMP002 with the layer and the next step named; healthy models (SmolLM2 fp32 and bf16, a
quantized copy, Gemma 3 270M from its Q4_K_M GGUF, an adapter on SmolLM2, the demo model, factory models)
get no warning or error from the family. One check run per model, shared by the tests (module fixtures)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from llmdoctor.cli import DEMO_MODEL
from llmdoctor.run.runner import run_checks
from tests.checks.competence.broken import BROKEN
from tests.checks.competence.oracle import judge
from tests.checks.conftest import no_crashes

FAMILY = ["CMP"]


def problems(report) -> list[str]:
    return [f"{f.check}:{f.severity.value}: {f.message}" for f in report.findings if f.severity.value != "info"]


@pytest.fixture(scope="module")
def reports():
    """reports(path, **options) -> the CMP report of that model (run once per module)."""
    done: dict = {}

    def get(path, **options):
        key = (str(path), tuple(sorted(options.items())))
        if key not in done:
            done[key] = run_checks(path, select=FAMILY, quick=True, **options)
        return done[key]
    return get


@pytest.fixture(scope="module")
def broken(tmp_path_factory, smollm2_dir):
    """broken(name) -> the Broken copy of SmolLM2 (built once per module)."""
    built: dict = {}

    def get(name: str):
        if name not in built:
            built[name] = BROKEN[name](smollm2_dir, tmp_path_factory.mktemp(name) / "model")
        return built[name]
    return get


@pytest.mark.assets
@pytest.mark.slow
@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_copy_talks_nonsense_and_is_caught(name, broken, reports, smollm2_dir):
    copy = broken(name)
    oracle = judge(copy.path, copy.effective, smollm2_dir)          # transformers on what a loader reads
    assert oracle["loss"] > oracle["unigram"] and oracle["copy_ratio"] > 0.5, oracle
    report = reports(copy.path)
    no_crashes(report)
    fired = {f.check: f for f in report.findings if f.severity.value == "error"}
    assert {"CMP001", "CMP002"} <= set(fired), problems(report)
    text = fired["CMP001"]
    assert text.evidence["loss"] > text.evidence["bound"] and text.evidence["ln_v"] == pytest.approx(math.log(49152))
    assert text.evidence["unigram_loss"] == pytest.approx(oracle["unigram"])
    assert text.evidence["first_failing_layer"] is not None and "logit lens fails from layer" in text.message
    assert text.evidence["note"] and len(text.evidence["lens"]) == 30
    if name == "awq_plain_order":                                   # the quantized module of that layer is named
        assert any(".layers." in m and "proj" in m for m in text.evidence["quantized_modules"])


@pytest.mark.assets
def test_smollm2_float32_reads_copies_and_is_quiet(reports, smollm2_dir):
    report = reports(smollm2_dir)
    no_crashes(report)
    assert problems(report) == [] and [f for f in report.findings if f.check.startswith("CMP")] == []
    assert {c.id: c.status for c in report.checks} == {"CMP001": "passed", "CMP002": "passed", "CMP003": "passed"}


@pytest.mark.assets
@pytest.mark.slow
def test_smollm2_bfloat16_is_quiet(reports, smollm2_dir):
    report = reports(smollm2_dir, dtype="bfloat16")
    no_crashes(report)
    assert problems(report) == []


@pytest.mark.assets
@pytest.mark.slow
def test_gemma3_q4_k_m_gguf_is_quiet(reports, gemma3_270m_dir):
    gguf = next(Path(gemma3_270m_dir).parent.glob("gemma3-270m-gguf/*.gguf"))
    report = reports(gguf)
    no_crashes(report)
    assert problems(report) == []


@pytest.mark.assets
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["gptq_v1_b4_g32_sym", "awq_gemm_g32", "ct_w4a16_group_sym", "fp8_block_32",
                                     "bnb_nf4_dq"])
def test_healthy_quantized_smollm2_is_quiet(variant, reports, smollm2_dir, tmp_path_factory):
    from tests.quant_builders import build_variant
    build = build_variant(variant, smollm2_dir, tmp_path_factory.mktemp(variant) / "model")
    report = reports(build.path)
    no_crashes(report)
    assert problems(report) == []


@pytest.mark.assets
@pytest.mark.slow
def test_adapter_on_smollm2_is_quiet(reports, smollm2_dir, tmp_path_factory):
    from tests.peft_adapters import make_adapter
    adapter, _ = make_adapter(smollm2_dir, tmp_path_factory.mktemp("lora") / "adapter", r=8, lora_alpha=16,
                              target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], seed=3)
    report = reports(smollm2_dir, adapter=adapter)
    no_crashes(report)
    assert problems(report) == []


def test_demo_model_is_measured_not_judged(reports):
    report = reports(DEMO_MODEL)
    no_crashes(report)
    assert problems(report) == []
    info = [f for f in report.findings if f.check.startswith("CMP")]
    assert info and all("too small to be held" in f.message and f.evidence["parameters"] < 50e6 for f in info)


@pytest.mark.parametrize("preset", ["llama", "qwen3"])
def test_untrained_factory_model_is_named_untrained_never_an_error(preset, reports, factory_model_dir):
    report = reports(factory_model_dir(preset))
    no_crashes(report)
    assert problems(report) == []
    named = [f for f in report.findings if f.check in ("CMP001", "CMP002")]
    assert named and all(f.message.startswith("untrained") for f in named)


FULL_SIZE = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4,
                 vocab_size=50_000, torch_dtype="bfloat16")     # 55.9M parameters: above MIN_JUDGED_PARAMETERS


@pytest.mark.parametrize("preset", ["llama", "deepseek_v3", "llama4"])
def test_full_size_model_at_its_initial_weights_is_an_error(preset, reports, factory_model_dir):
    """A checkpoint as large as the bounds are calibrated for, saved at its initialisation (a conversion or save
    that lost the trained weights), is an error, named as such; the small factory models above stay info. The
    newer families too (MLA + grouped routing; chunked attention, NoPE layers, interleaved MoE): their tiny
    twins are measured, not judged, in each family's check run (tests/checks/test_family_checks.py and beside it).
    ~5-10 s each on 2 cores: a 110-130 MB bf16 model built once and prefilled."""
    from probes.competence.bounds import MIN_JUDGED_PARAMETERS
    report = reports(factory_model_dir(preset, **FULL_SIZE))
    no_crashes(report)
    text = report.findings_for("CMP001")[0]
    assert text.severity.value == "error" and text.message.startswith("weights still at their initialisation")
    assert "lost the trained weights" in text.message
    assert text.evidence["parameters"] >= MIN_JUDGED_PARAMETERS and text.evidence["weights_at_initialisation"]
