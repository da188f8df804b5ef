"""The quantized fault zoo: every fault fires its QNT check, a healthy checkpoint of each format gets no QNT
warning or error, no check crashes, nothing is written into the model directory."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import checks
from llmdoctor.run.runner import run_checks
from tests.checks.conftest import STATIC_CATEGORIES, fired, no_crashes, problems
from tests.checks.zoo_quant import FAULTS, FORMATS, quantize_dir


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, factory_model_dir):
    """quantized(fmt) -> a healthy quantized copy of the factory Llama (built once per format; read-only)."""
    built: dict[str, Path] = {}

    def get(fmt: str) -> Path:
        if fmt not in built:
            built[fmt] = quantize_dir(factory_model_dir("llama"), tmp_path_factory.mktemp(fmt) / "model", fmt)
        return built[fmt]
    return get


def copy_of(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_healthy_quantized_model_has_no_qnt_problem(fmt, quantized):
    d = quantized(fmt)
    before = digest(d)
    report = run_checks(d, select=["QNT"])
    no_crashes(report)
    assert problems(report) == []
    summary = [f for f in report.findings if f.check == "QNT012"]
    assert len(summary) == 1 and summary[0].evidence["float_linear"] == ["lm_head"]
    assert digest(d) == before


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_quant_fault_fires_its_check(fault, quantized, tmp_path, confusion):
    d = copy_of(quantized(fault.fmt), tmp_path / "model")
    fault.apply(d)
    report = run_checks(d, select=["QNT"])
    confusion(f"quant:{fault.name}", fault.check, fired(report))
    no_crashes(report)
    assert f"{fault.check}:{fault.severity}" in fired(report), (fault.name, fired(report))
    hit = next(f for f in report.findings if f.check == fault.check)
    assert hit.location is not None and hit.location.logical, hit


def test_zoo_covers_every_qnt_check():
    from tests.checks.quant.test_mxfp4_checks import FAULTS as MXFP4_FAULTS    # gpt-oss experts: their own base
    ids = {s.id for s in checks.load_all() if s.family == "QNT" and s.severity.value != "info"}
    assert ids - {f.check for f in FAULTS} - {f.check for f in MXFP4_FAULTS} == set()
    assert len({f.name for f in FAULTS}) == len(FAULTS)


def test_v2_declared_v1_names_the_convention(quantized, tmp_path):
    from tests.checks.zoo_quant import edit_qc
    d = copy_of(quantized("gptq_v2"), tmp_path / "model")
    edit_qc(checkpoint_format="gptq")(d)
    hit = next(f for f in run_checks(d, select=["QNT004"]).findings)
    assert hit.evidence["stored_zero"] == 8 and hit.location.logical == "quantization_config.checkpoint_format"
    assert "gptq_v2" in hit.message


def test_bits_mismatch_is_reported_once_at_the_config_key(quantized, tmp_path):
    from tests.checks.zoo_quant import edit_qc
    d = copy_of(quantized("gptq"), tmp_path / "model")
    edit_qc(bits=8)(d)
    found = [f for f in run_checks(d, select=["QNT002"]).findings]
    assert len(found) == 1 and found[0].evidence["implied"] == 4
    assert found[0].location.logical == "quantization_config.bits"


@pytest.mark.parametrize("variant", list(__import__("tests.quant_builders", fromlist=["VARIANTS"]).VARIANTS))
def test_every_builder_variant_is_qnt_clean(variant, factory_model_dir, tmp_path):
    """The independent producers' checkpoints (tests/quant_builders.py) of every format and option."""
    from tests.quant_builders import build_variant
    build = build_variant(variant, factory_model_dir("llama"), tmp_path / "model")
    report = run_checks(build.path, select=["QNT", *STATIC_CATEGORIES])
    no_crashes(report)
    assert problems(report) == []
    summary = next(f for f in report.findings if f.check == "QNT012")
    assert summary.evidence["layouts"] and sum(summary.evidence["layouts"].values()) == len(build.quantized)


def test_declared_kv_cache_with_every_scale_is_clean(quantized, tmp_path):
    from tests.checks.zoo_quant import with_kv_scales
    d = copy_of(quantized("ct_fp8"), tmp_path / "model")
    with_kv_scales()(d)
    report = run_checks(d, select=["QNT"])
    assert problems(report) == [] and next(r for r in report.checks if r.id == "QNT010").status == "passed"


@pytest.mark.parametrize("variant,stored", [("gptq_v2_b2_g32_sym", 2), ("gptq_v2_b8_chan_sym_descact", 128)])
def test_v2_zeros_declared_v1_at_other_bit_widths(variant, stored, factory_model_dir, tmp_path):
    """The independent producer's v2 checkpoints (2 and 8 bits, per channel, act-order) relabelled v1."""
    from tests.checks.zoo_quant import edit_qc
    from tests.quant_builders import build_variant
    d = build_variant(variant, factory_model_dir("llama"), tmp_path / "model").path
    assert run_checks(d, select=["QNT004"]).findings == []
    edit_qc(checkpoint_format="gptq")(d)
    hit = [f for f in run_checks(d, select=["QNT004"]).findings if f.severity.value == "error"]
    assert len(hit) == 1 and hit[0].evidence["stored_zero"] == stored, hit


@pytest.mark.parametrize("fmt", ["gptq", "ct_fp8", "nvfp4"])
def test_float16_quantized_model_static_checks_are_clean(fmt, factory_model_dir, tmp_path):
    """Norms and embeddings in float16 beside dequantized (float32) weights and float32 scales: not a
    mixed-dtype checkpoint."""
    d = quantize_dir(factory_model_dir("llama", torch_dtype="float16"), tmp_path / "model", fmt)
    report = run_checks(d, select=["QNT", *STATIC_CATEGORIES])
    no_crashes(report)
    assert problems(report) == []
