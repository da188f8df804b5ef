"""Row classification (zero / near-zero / low-norm / mean-initialised / ok), EMB003's in-use rule and
threshold overrides. Firing on broken models is in the zoo."""
from __future__ import annotations

import torch

from checks.vocab.special_rows import classify
from llmdoctor.run.runner import run_checks
from tests.checks import zoo


def test_classify_each_kind():
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(200, 16, generator=gen) + 0.5          # a common direction, as trained rows have
    trained = list(range(5, 200))
    mean = rows[trained].mean(dim=0)
    rows[0] = 0.0
    rows[1] = rows[1] * 1e-6
    rows[2] = rows[2] * 0.01
    rows[3] = mean
    values = {i: rows[i].clone() for i in range(5)}
    verdicts = classify("m", torch.linalg.vector_norm(rows, dim=1), rows.abs().amax(dim=1), rows.double().sum(0),
                        values)
    kinds = {i: v.kind for i, v in verdicts.verdicts.items()}
    # row 3 (the mean) counts as trained here, so the trained mean includes it: still equal to it
    assert kinds == {0: "zero", 1: "near_zero", 2: "low_norm", 3: "mean_init", 4: "ok"}
    torch.testing.assert_close(verdicts.trained_mean, rows[3:].double().mean(0).float())


def findings(model_dir, check_id, thresholds=None):
    report = run_checks(model_dir, select=[check_id], thresholds=thresholds or {})
    return [(f.severity.value, f.evidence) for f in report.findings]


def test_identical_rows_warn_only_for_tokens_in_use(broken_copy):
    def share(*tokens):
        return zoo.special_rows(lambda r, k: zoo.SHARED_ROW.to(r.dtype), tokens=tokens)
    # <|im_start|> is written by the chat template: a warning
    used = broken_copy("llama", share(zoo.EOS, zoo.IM_START))
    assert {sev for sev, _ in findings(used, "EMB003")} == {"warning"}
    # with pad == eos, <|pad|> and <|end_of_text|> are used by nothing: info (SmolLM2's code tokens)
    unused = broken_copy("llama", zoo.both(zoo.pad_is_eos, share(zoo.EOS, zoo.PAD)))
    assert {sev for sev, _ in findings(unused, "EMB003")} == {"info"}
    assert all(ev["in_use"] == [] for _, ev in findings(unused, "EMB003"))


def test_thresholds_tune_detection(broken_copy):
    d = broken_copy("llama", zoo.special_rows(lambda r, k: r * 0.01))  # embedding and lm_head
    assert [sev for sev, _ in findings(d, "EMB002")] == ["warning", "warning"]
    assert findings(d, "EMB002", {"EMB002": {"low_norm_ratio": 0.001}}) == []
    big = broken_copy("llama", zoo.special_rows(lambda r, k: r * 10.0, tokens=(zoo.PAD,), names=(zoo.EMBED,)))
    assert findings(big, "EMB004") == []
    assert [sev for sev, _ in findings(big, "EMB004", {"EMB004": {"norm_ratio": 5.0}})] == ["warning"]
