"""Declared sizes against the tensors present: a config claiming more layers than the checkpoint
holds is one WGT001 finding computed from the names present; past the sane bound it is CFG001; the expected
tensor table never grows with the claim."""
from __future__ import annotations

import pytest

from checks.shared.weights.tensor_layout import backed_layers, expected_tensors, layer_shortfall
from checks.catalogue.inputs import CheckInputs
from checks.catalogue.registry import Skip
from llmdoctor.run.runner import run_checks
from reference_engine import limits
from tests.checks import zoo


def findings(report, check_id):
    return [f for f in report.findings if f.check == check_id]


def test_a_billion_layers_is_a_config_finding(broken_copy):
    d = broken_copy("llama", zoo.edit_json("config.json", num_hidden_layers=10**9))
    report = run_checks(d, select=["config", "weights"])            # was: OOM kill building 9e9 tensor names
    (cfg,) = findings(report, "CFG001")
    assert "'num_hidden_layers' is 1000000000, above the sane limit of 1024" in cfg.message
    assert {r.status for r in report.checks if r.id in ("WGT001", "WGT002", "WGT003", "WGT004")} == {"skipped"}


@pytest.mark.parametrize("declared", [3, 1000])
def test_more_layers_than_stored_is_one_wgt001_finding(broken_copy, declared):
    d = broken_copy("llama", zoo.edit_json("config.json", num_hidden_layers=declared))
    report = run_checks(d, select=["WGT001", "WGT002", "WGT003"])
    (short,) = findings(report, "WGT001")
    assert short.message == (f"config.json declares {declared} decoder layers but the weights hold tensors only "
                             f"for layers 0..1: {declared - 2} trailing layer(s) missing")
    assert short.evidence == {"num_hidden_layers": declared, "layers_in_weights": 2}
    assert findings(report, "WGT002") == [] and findings(report, "WGT003") == []


def test_a_hole_below_the_last_layer_is_missing_tensors_not_a_shortfall(broken_copy):
    def drop_layer_1(t, d):
        for name in [n for n in t if n.startswith("model.layers.1.")]:
            t[name.replace("layers.1.", "layers.2.")] = t.pop(name)
    d = broken_copy("llama", zoo.both(zoo.edit_json("config.json", num_hidden_layers=3),
                                       zoo.edit_tensors(drop_layer_1)))
    (missing,) = findings(run_checks(d, select=["WGT001"]), "WGT001")
    assert missing.message.startswith("9 tensor(s) missing, e.g. model.layers.1.")


def test_expected_table_follows_the_files_not_the_claim(broken_copy):
    ctx = CheckInputs(broken_copy("llama", zoo.edit_json("config.json", num_hidden_layers=1000)))
    names = ctx.weights.names
    table = expected_tensors(ctx.config, names)
    assert backed_layers(ctx.config, names) == 2 and len(table) == len(names)
    assert layer_shortfall(ctx.config, names).backed == 2
    stray = names + ["model.layers.999.mlp.up_proj.weight"]         # one stray index cannot inflate the table
    assert backed_layers(ctx.config, stray) == 1000
    assert len(expected_tensors(ctx.config, stray)) == 3 + 1000 * 9
    assert expected_tensors(ctx.config) is not None                 # without names: the declared table


def test_expected_table_is_capped_for_many_tensors_per_layer(broken_copy, monkeypatch):
    ctx = CheckInputs(broken_copy("llama", zoo.edit_json("config.json", num_hidden_layers=1000)))
    import checks.shared.weights.tensor_layout as layout
    monkeypatch.setattr(layout, "MAX_EXPECTED_TENSORS", 90)
    stray = ctx.weights.names + ["model.layers.999.x"]
    assert backed_layers(ctx.config, stray) == 10                  # 90 entries / 9 per layer
    assert limits.MAX_EXPECTED_TENSORS >= 100_000                  # real MoE checkpoints stay below it


def test_a_family_that_cannot_describe_the_tensors_skips_the_weight_checks(broken_copy):
    d = broken_copy("llama", zoo.edit_json("config.json", architectures=["MixtralForCausalLM"],
                                           num_local_experts=8, num_experts_per_tok="2"))
    ctx = CheckInputs(d)
    with pytest.raises(Skip, match="num_experts_per_tok"):
        expected_tensors(ctx.config, ctx.weights.names)
    report = run_checks(d, select=["WGT001", "WGT002", "WGT003"])
    assert {r.status for r in report.checks} == {"skipped"}
