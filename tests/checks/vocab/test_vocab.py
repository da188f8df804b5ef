"""The six vocabulary figures are reported exactly, for untied and tied models."""
from __future__ import annotations

from llmdoctor.run.runner import run_checks
from tests.checks import zoo


def summary(model_dir):
    (finding,) = run_checks(model_dir, select=["VOC001"]).findings
    return finding.evidence


def test_summary_reports_all_six_figures(broken_copy):
    d = broken_copy("llama", zoo.add_tokens_beyond)
    assert summary(d) == {"tokenizer_vocab_size": 507, "tokenizer_len": 516, "max_token_id": 515,
                          "config_vocab_size": 512, "embedding_rows": 512, "lm_head_rows": 512}


def test_tied_model_uses_embedding_rows_for_the_head(factory_model_dir):
    figures = summary(factory_model_dir("qwen2", tie_word_embeddings=True))
    assert figures["lm_head_rows"] == figures["embedding_rows"] == 512
    report = run_checks(factory_model_dir("qwen2", tie_word_embeddings=True), select=["vocab"])
    assert [f.severity.value for f in report.findings if f.check != "VOC001"] == []
