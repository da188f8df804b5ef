"""`llmdoctor diff` (the DIF family) on built models: an identical copy reads exactly zero / 100 % everywhere; a
perturbed v_proj in layer k is named at layer k; a config, chat template or tokenizer edit is the finding it
should be; a baseline JSON as the candidate gives what it can and skips the rest with a reason."""
from __future__ import annotations

import shutil

import pytest
import torch

from llmdoctor.run.diff_runner import run_diff
from tests.checks.zoo import edit_json, edit_tensors, edit_tokenizer, read_json

DEEP = {"num_hidden_layers": 4}


def copy(src, tmp_path, name="cand"):
    out = tmp_path / name
    shutil.copytree(src, out)
    return out


def by_check(report, check_id):
    return report.findings_for(check_id)


def status(report, check_id):
    return next(r for r in report.checks if r.id == check_id)


@pytest.fixture(scope="module")
def identical_report(factory_model_dir, tmp_path_factory):
    ref = factory_model_dir("llama", **DEEP)
    cand = copy(ref, tmp_path_factory.mktemp("identical"))
    return run_diff(ref, cand, quick=True)


def test_identical_copy_every_statistic_is_exactly_zero(identical_report):
    report = identical_report
    assert all(r.status == "passed" for r in report.checks), [(r.id, r.status, r.reason) for r in report.checks]
    assert all(f.severity.value == "info" for f in report.findings), [f.message for f in report.findings]
    assert report.exit_code("warning") == 0
    kld = by_check(report, "DIF030")[0].evidence
    for key in ("kld_mean", "kld_max", "kld_min", "kld_median", "kld_p99.9", "kld_p0.1", "dp_mean", "dp_rms",
                "dp_max", "dp_min", "ln_ppl_ratio", "ppl_diff"):
        assert kld[key] == 0.0, key
    assert kld["same_top"] == 1.0 and kld["ppl_ratio"] == 1.0 and kld["ppl_ref"] == kld["ppl_cand"]
    assert kld["positions"] > 0
    layers = by_check(report, "DIF040")[0].evidence
    assert layers["first_crossing"] is None and layers["largest_own_error"] is None
    assert all(row["hidden_cos"] == 1.0 for row in layers["layers"])
    weights = by_check(report, "DIF020")[0].evidence
    assert weights["differing"] == 0 and all(r["max_abs"] == 0.0 and r["cosine"] == 1.0 for r in weights["ranked"])
    assert "identical" in by_check(report, "DIF050")[0].message
    assert by_check(report, "DIF011")[0].evidence["identical_share"] == 1.0


@pytest.mark.parametrize("layer", [1, 2])
def test_perturbed_v_proj_names_that_layer_first(factory_model_dir, tmp_path, layer):
    ref = factory_model_dir("llama", **DEEP)
    cand = copy(ref, tmp_path)
    name = f"model.layers.{layer}.self_attn.v_proj.weight"

    def perturb(t, d):
        gen = torch.Generator().manual_seed(0)
        t[name] = t[name] + 0.5 * t[name].std() * torch.randn(t[name].shape, generator=gen)
    edit_tensors(perturb)(cand)
    report = run_diff(ref, cand, quick=True, select=["DIF020", "DIF030", "DIF040"])
    where = by_check(report, "DIF040")[0]
    assert where.severity.value == "warning"
    assert where.evidence["first_crossing"]["where"] == f"layer {layer} attn"
    assert where.evidence["first_own_crossing"]["where"] == f"layer {layer} attn"
    assert where.evidence["largest_own_error"]["where"] == f"layer {layer} attn"
    assert f"layer {layer} attn" in where.message
    # isolated: every other sub-module's own error is exactly zero
    rows = where.evidence["layers"]
    assert all(r["attn_own_db"] == "-inf" for r in rows if r["layer"] != layer)   # NMSE exactly 0
    assert all(r["mlp_own_db"] == "-inf" and r["norms_own_db"] == "-inf" for r in rows)
    assert all(r["hidden_db"] == "-inf" for r in rows if r["layer"] < layer)   # bit-identical before it
    assert all(isinstance(r["hidden_db"], float) for r in rows if r["layer"] >= layer)
    plot = where.data["plot"]["series"]["attention (own error)"]
    assert plot[layer] is not None and all(v is None for i, v in enumerate(plot) if i != layer)
    weights = by_check(report, "DIF020")
    summary = next(f for f in weights if f.severity.value == "info")
    assert summary.evidence["differing"] == 1
    assert summary.evidence["ranked"][0]["tensor"] == f"layers.{layer}.self_attn.v_proj.weight"
    kld = by_check(report, "DIF030")[0].evidence
    assert kld["kld_mean"] > 0 and kld["kld_min"] >= 0


def test_chat_template_difference_is_shown_as_a_rendered_diff(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama")
    cand = copy(ref, tmp_path)
    template = read_json(cand, "tokenizer_config.json")["chat_template"]
    edit_json("tokenizer_config.json", chat_template=template.replace("\n", "\n\n", 1))(cand)
    assert read_json(cand, "tokenizer_config.json")["chat_template"] != template
    report = run_diff(ref, cand, select=["DIF004"])
    [finding] = by_check(report, "DIF004")
    assert finding.severity.value == "warning"
    diff = finding.evidence["text_diff"]
    assert diff[0].startswith("--- reference") and diff[1].startswith("+++ candidate")
    assert any(line.startswith("+") and not line.startswith("+++") for line in diff)
    assert finding.evidence["reference_ids"] != finding.evidence["candidate_ids"]


def test_config_and_special_id_differences_are_one_finding_each(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama")
    cand = copy(ref, tmp_path)
    edit_json("config.json", rope_theta=500000.0, rms_norm_eps=1e-3)(cand)
    edit_json("generation_config.json", eos_token_id=0)(cand)
    report = run_diff(ref, cand, select=["DIF001", "DIF003"])
    fields = sorted(f.evidence["field"] for f in by_check(report, "DIF001") if f.severity.value == "warning")
    assert fields == ["rms_norm_eps", "rope_theta"]
    gen = by_check(report, "DIF003")
    assert [f.evidence["key"] for f in gen] == ["eos_token_id"] and gen[0].severity.value == "warning"


def test_tokenizer_difference_shows_spans_with_both_id_sequences(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama")
    cand = copy(ref, tmp_path)
    merges = read_json(ref, "tokenizer.json")["model"]["merges"]

    def drop_merges(tok):        # the 40 most frequent merges gone: common words split into more pieces
        tok["model"]["merges"] = tok["model"]["merges"][40:]
    edit_tokenizer(drop_merges)(cand)
    report = run_diff(ref, cand, select=["DIF010", "DIF011"])
    merge_finding = next(f for f in by_check(report, "DIF010") if "merges" in f.message)
    assert f"{len(merges)} vs {len(merges) - 40}" in merge_finding.message
    [spans] = by_check(report, "DIF011")
    assert spans.severity.value == "warning"
    assert spans.evidence["identical_share"] < 1.0
    first = spans.evidence["spans"][0]
    assert first["reference_ids"] != first["candidate_ids"]
    assert first["reference_text"] == first["candidate_text"]   # same text, split differently


def test_baseline_candidate_computes_what_it_can(factory_model_dir, tmp_path):
    from llmdoctor.run.baseline_recording import record, save
    ref = factory_model_dir("llama")
    path = save(record(ref, quick=True), tmp_path / "golden.json", ref)
    report = run_diff(ref, path, quick=True)
    kld = by_check(report, "DIF030")[0]
    assert kld.severity.value == "info" and kld.evidence["same_top"] == 1.0
    assert kld.evidence["kld_mean_lower_bound"] < 1e-6
    assert "ppl" in kld.evidence["not_computed"]
    assert "reproduced" in by_check(report, "DIF050")[0].message
    for check_id in ("DIF001", "DIF010", "DIF020", "DIF040"):
        run = status(report, check_id)
        assert run.status == "skipped" and "baseline file" in run.reason, (check_id, run.reason)


def test_check_command_never_runs_dif_checks(factory_model_dir):
    from llmdoctor.run.runner import run_checks
    report = run_checks(factory_model_dir("llama"), select=["config"])
    assert report.checks and not any(r.id.startswith("DIF") for r in report.checks)


def test_streaming_engines_report_what_resident_ones_report(factory_model_dir, tmp_path, monkeypatch):
    ref = factory_model_dir("llama", **DEEP)
    cand = copy(ref, tmp_path)
    name = "model.layers.2.mlp.down_proj.weight"
    edit_tensors(lambda t, d: t.__setitem__(name, t[name] * 1.5))(cand)
    select = ["DIF030", "DIF040", "DIF050"]
    resident = run_diff(ref, cand, quick=True, select=select, memory_budget="64GiB")
    from reference_engine.streaming.streaming_core import StreamingCore
    built = []
    original = StreamingCore.from_pretrained.__func__
    monkeypatch.setattr(StreamingCore, "from_pretrained",
                        classmethod(lambda cls, *a, **k: built.append(a[0]) or original(cls, *a, **k)))
    monkeypatch.setenv("LLMDOCTOR_STREAMING", "1")
    streaming = run_diff(ref, cand, quick=True, select=select, memory_budget="64GiB")
    assert len(built) == 2          # both sides streamed one layer at a time
    assert [(f.check, f.severity, f.message) for f in streaming.findings] == \
        [(f.check, f.severity, f.message) for f in resident.findings]
    assert "layer 2 mlp" in streaming.findings_for("DIF040")[0].message


def test_special_ids_added_tokens_and_one_sided_tensors(factory_model_dir, tmp_path):
    from tests.checks.zoo import EMBED, LM_HEAD, special_id
    ref = factory_model_dir("llama")
    cand = copy(ref, tmp_path)
    edit_json("config.json", bos_token_id=special_id(ref, "<|im_start|>"), tie_word_embeddings=True)(cand)

    def demote(tok):
        entry = next(t for t in tok["added_tokens"] if t["content"] == "<|im_end|>")
        entry["special"] = False
    edit_tokenizer(demote)(cand)
    edit_tensors(lambda t, d: t.pop(LM_HEAD))(cand)
    report = run_diff(ref, cand, select=["DIF001", "DIF002", "DIF005", "DIF021"])
    assert any(f.evidence["field"] == "config.bos_token_id" for f in by_check(report, "DIF002"))
    assert any(f.evidence.get("field") == "tie_word_embeddings" for f in by_check(report, "DIF001"))
    [added] = by_check(report, "DIF005")
    assert added.evidence["token"] == "<|im_end|>" and added.evidence["candidate"][1] is False
    [one_sided] = by_check(report, "DIF021")
    assert one_sided.evidence["tensors"] == [LM_HEAD] and "only in the reference" in one_sided.message
    assert EMBED not in one_sided.evidence["tensors"]


def test_replaced_and_reshaped_tensors(factory_model_dir, tmp_path):
    from tests.checks.zoo import resize_rows
    ref = factory_model_dir("llama")
    cand = copy(ref, tmp_path)
    name = "model.layers.0.mlp.up_proj.weight"
    edit_tensors(lambda t, d: t.__setitem__(name, torch.randn(t[name].shape) * t[name].std()))(cand)
    resize_rows(600)(cand)
    report = run_diff(ref, cand, select=["DIF020"])
    severities = {f.evidence.get("tensor"): f.severity.value for f in by_check(report, "DIF020")}
    assert severities["layers.0.mlp.up_proj.weight"] == "warning"       # another tensor, not a rounding
    assert severities["embed_tokens.weight"] == "error" and severities["lm_head.weight"] == "error"
    assert status(report, "DIF020").status == "failed"


def test_greedy_divergence_shows_both_top5(factory_model_dir, tmp_path):
    ref = factory_model_dir("llama", **DEEP)
    cand = copy(ref, tmp_path)
    name = "model.layers.3.mlp.down_proj.weight"
    edit_tensors(lambda t, d: t.__setitem__(name, t[name] * 3.0))(cand)
    report = run_diff(ref, cand, quick=True, select=["DIF050"])
    diverged = [f for f in by_check(report, "DIF050") if f.severity.value == "warning"]
    assert diverged, [f.message for f in by_check(report, "DIF050")]
    ev = diverged[0].evidence
    assert len(ev["reference_top5"]) == 5 and len(ev["candidate_top5"]) == 5
    assert ev["reference_top5"][0]["id"] != ev["candidate_top5"][0]["id"]   # each side's argmax at the split
    assert all(0 <= row["p"] <= 1 for row in ev["reference_top5"] + ev["candidate_top5"])


# SmolLM2-135M-Instruct's template: a conversation without a system message gets a default system turn
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_template_that_lost_its_default_system_turn_is_found(factory_model_dir, tmp_path):
    """The candidate's template lacks SmolLM2's default-system branch: every conversation that brings its own
    system message renders the same, so only the conversations without one can show it."""
    ref = copy(factory_model_dir("llama"), tmp_path, "ref")
    edit_json("tokenizer_config.json", chat_template=SMOLLM2_TEMPLATE)(ref)
    cand = copy(ref, tmp_path)
    lost = SMOLLM2_TEMPLATE.replace(SMOLLM2_TEMPLATE[SMOLLM2_TEMPLATE.index("{% if loop.first"):
                                                     SMOLLM2_TEMPLATE.index("{% endif %}") + 11], "")
    assert "SmolLM" not in lost and lost != SMOLLM2_TEMPLATE
    edit_json("tokenizer_config.json", chat_template=lost)(cand)
    [finding] = by_check(run_diff(ref, cand, select=["DIF004"]), "DIF004")
    differing = finding.evidence["differing"]
    assert len(differing) == 4 and all(d.startswith(("no system", "multi-turn,")) for d in differing)
    assert "default system turn" in finding.message and "4 of 8" in finding.message
    assert any("SmolLM" in line for line in finding.evidence["text_diff"] if line.startswith("-"))
    same = copy(ref, tmp_path, "same")
    assert by_check(run_diff(ref, same, select=["DIF004"]), "DIF004") == []
