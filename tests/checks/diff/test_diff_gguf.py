"""`llmdoctor diff` across formats: the factory model as a Hugging Face directory against the same weights in a
GGUF file (llama.cpp tensor names, Q/K rows permuted) written the way convert_hf_to_gguf.py does
(tests/checks/zoo_gguf.py). F32: tensors matched by role are bit-identical and the logits agree exactly;
Q8_0: a small but non-zero KLD, every weight within Q8_0's rounding."""
from __future__ import annotations

from llmdoctor.run.diff_runner import run_diff
from tests.checks import zoo_gguf


SELECT = ["DIF001", "DIF020", "DIF021", "DIF030", "DIF040"]


def gguf_of_factory(tmp_path, quant):
    return zoo_gguf.write_spec(zoo_gguf.export_spec("llama", quant=quant), tmp_path / f"tiny-{quant.name}.gguf")


def info(report, check_id):
    return next(f for f in report.findings_for(check_id) if f.severity.value == "info")


def test_f32_gguf_of_the_same_weights_is_identical(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama")
    report = run_diff(ref, gguf_of_factory(tmp_path, zoo_gguf.F32), quick=True, select=SELECT)
    crashed = [(r.id, r.reason) for r in report.checks if r.status in ("crashed", "skipped")]
    assert not crashed, crashed
    weights = info(report, "DIF020").evidence
    assert weights["differing"] == 0 and weights["matched"] > 0
    assert not report.findings_for("DIF021")
    kld = report.findings_for("DIF030")[0].evidence
    assert kld["kld_mean"] == 0.0 and kld["same_top"] == 1.0 and kld["ppl_ratio"] == 1.0
    assert report.findings_for("DIF040")[0].evidence["first_crossing"] is None
    assert not [f for f in report.findings_for("DIF001") if f.severity.value != "info"]


def test_q8_0_gguf_differs_by_rounding_only(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama")
    report = run_diff(ref, gguf_of_factory(tmp_path, zoo_gguf.Q8_0), quick=True, select=SELECT)
    weights = info(report, "DIF020").evidence
    assert weights["differing"] > 0
    worst = weights["ranked"][0]
    assert -60 < worst["nmse_db"] < -30 and worst["cosine"] > 0.9999   # Q8_0: ~-45 dB per tensor
    assert not [f for f in report.findings_for("DIF020") if f.severity.value != "info"]
    kld = report.findings_for("DIF030")[0]
    assert 0 < kld.evidence["kld_mean"] < 0.01 and kld.severity.value == "info"
