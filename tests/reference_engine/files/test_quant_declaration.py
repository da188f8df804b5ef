"""One reading of quantization_config for the engine and the QNT checks (files/quant/declaration.py): each
declaration runs through both, and they agree — what the engine refuses as a fault is a QNT001 error at its
key, what it refuses as unsupported-but-real is a QNT001 note, what it loads is no QNT001 problem. Mixed
precision (two compressed-tensors config groups), a g_idx past the last group and AutoGPTQ's biases on every
quantized linear, through both too."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from llmdoctor.run.runner import run_checks
from reference_engine.engine import Engine
from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.source import model_source
from reference_engine.testing.factory import build_model_dir
from tests.checks.conftest import STATIC_CATEGORIES, no_crashes, problems
from tests.hf_models import hf_logits, load_hf_model
from tests.quant_builders import QuantBuild, build_variant, float_copy, gptq, write_quant_dir

IDS = list(range(3, 40, 2))
TOL = 1e-4
ATTN, MLP0 = "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("quant-decl")


@pytest.fixture(scope="module")
def float_dir(root):
    return build_model_dir(root / "float", "llama", seed=5, initializer_range=0.06)


@pytest.fixture(scope="module")
def built(float_dir, root):
    cache = {}

    def get(variant):
        if variant not in cache:
            cache[variant] = build_variant(variant, float_dir, root / variant)
        return cache[variant]
    return get


def edited(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config["quantization_config"])
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def engine_outcome(path) -> str:
    """"loads", "invalid" (ModelDirError) or "unsupported" (UnsupportedError), the message one line."""
    try:
        Engine.from_pretrained(path, num_blocks=8).logits([1, 2, 3])
        return "loads"
    except UnsupportedError as e:
        assert "\n" not in str(e)
        return "unsupported"
    except ModelDirError as e:
        assert "\n" not in str(e)
        return "invalid"


def qnt001(path) -> set[str]:
    report = run_checks(path, select=["QNT"])
    no_crashes(report)
    return {f"{f.severity.value}:{f.location.logical}" for f in report.findings if f.check == "QNT001"}


def _set(key, value):
    return lambda qc: qc.__setitem__(key, value)


def _pop(key):
    return lambda qc: qc.pop(key, None)


# variant, edit, what the engine does, QNT001's findings (severity:location)
AGREE = {
    "gptq_bits_5": ("gptq_v1_b4_g32_sym", _set("bits", 5), "unsupported", {"error:quantization_config.bits"}),
    "gptq_bits_string": ("gptq_v1_b4_g32_sym", _set("bits", "4"), "invalid", {"error:quantization_config.bits"}),
    "gptq_group_zero": ("gptq_v1_b4_g32_sym", _set("group_size", 0), "invalid",
                        {"error:quantization_config.group_size"}),
    "gptq_marlin": ("gptq_v1_b4_g32_sym", _set("checkpoint_format", "marlin"), "unsupported",
                    {"error:quantization_config.checkpoint_format"}),
    "gptq_dynamic": ("gptq_v1_b4_g32_sym", _set("dynamic", {"-:.*lm_head": {}}), "unsupported",
                     {"info:quantization_config.dynamic"}),
    "gptq_bits_null": ("gptq_v1_b4_g32_sym", _set("bits", None), "invalid", {"error:quantization_config.bits"}),
    "awq_exllama": ("awq_gemm_g32", _set("version", "exllama"), "loads", set()),
    "awq_ipex": ("awq_gemm_g32", _set("version", "ipex"), "loads", set()),
    "awq_gemv": ("awq_gemm_g32", _set("version", "gemv"), "unsupported", {"info:quantization_config.version"}),
    "awq_nonsense_version": ("awq_gemm_g32", _set("version", "gemx"), "unsupported",
                             {"error:quantization_config.version"}),
    "ct_format_absent": ("ct_w4a16_group_asym", _pop("format"), "loads", set()),
    "ct_format_dense": ("ct_w4a16_group_asym", _set("format", "dense"), "loads", set()),
    "ct_format_mixed": ("ct_w4a16_group_asym", _set("format", "mixed-precision"), "loads", set()),
    "ct_format_unknown": ("ct_w4a16_group_asym", _set("format", "marlin-24"), "unsupported",
                          {"error:quantization_config.format"}),
    "ct_groups_not_object": ("ct_w4a16_group_asym", _set("config_groups", [1]), "invalid",
                             {"error:quantization_config.config_groups"}),
    "ct_num_bits_absurd": ("ct_w4a16_group_asym",
                           lambda qc: qc["config_groups"]["group_0"]["weights"].__setitem__("num_bits", 12),
                           "invalid", {"error:quantization_config.config_groups.group_0.weights.num_bits"}),
    "fp8_block_bad": ("fp8_block_32", _set("weight_block_size", [0, -3]), "invalid",
                      {"error:quantization_config.weight_block_size"}),
    "bnb_8bit": ("bnb_nf4_dq", lambda qc: qc.update(load_in_8bit=True, load_in_4bit=False, _load_in_4bit=False),
                 "unsupported", {"info:quantization_config.load_in_8bit"}),
    "bnb_neither": ("bnb_nf4_dq", lambda qc: qc.update(load_in_4bit=False, _load_in_4bit=False), "invalid",
                    {"error:quantization_config.load_in_4bit"}),
    "method_unknown": ("gptq_v1_b4_g32_sym", _set("quant_method", "hqq"), "unsupported",
                       {"error:quantization_config.quant_method"}),
}


@pytest.mark.parametrize("case", list(AGREE))
def test_engine_and_checks_read_the_declaration_alike(case, built, tmp_path):
    variant, edit, engine, findings = AGREE[case]
    path = edited(built(variant).path, tmp_path / "model", edit)
    assert engine_outcome(path) == engine
    assert qnt001(path) == findings


def test_refused_declaration_skips_the_engine_checks_with_its_reason(built, tmp_path):
    """AWQ GEMV: the file checks run (QNT002 measures the GEMV layout), the engine-backed ones skip."""
    path = edited(built("awq_gemm_g32").path, tmp_path / "model", _set("version", "gemv"))
    report = run_checks(path, select=["QNT", "golden"], device="cpu", quick=True)
    no_crashes(report)
    skipped = {c.id: c.reason for c in report.checks if c.status == "skipped"}
    assert any("awq version 'gemv'" in r for r in skipped.values()), skipped
    assert next(c for c in report.checks if c.id == "QNT002").status in ("passed", "failed")


def mixed_precision(float_dir, dst) -> QuantBuild:
    """Two config groups as llm-compressor writes a mixed recipe: attention W4A16 group 32 (asymmetric), the
    MLP W8A16 per channel, the top-level format "mixed-precision" and each group's own format."""
    a = build_variant("ct_w4a16_group_asym", float_dir, dst.parent / (dst.name + "-a"))
    b = build_variant("ct_w8a16_channel_sym", float_dir, dst.parent / (dst.name + "-b"))
    stored = {**load_file(str(b.path / "model.safetensors"))}
    stored = {k: v for k, v in stored.items() if ".self_attn." not in k}
    stored.update({k: v for k, v in load_file(str(a.path / "model.safetensors")).items() if ".self_attn." in k})
    qc = json.loads(json.dumps(a.config))
    attn, mlp = qc["config_groups"]["group_0"], b.config["config_groups"]["group_0"]
    attn.update(targets=["re:.*self_attn.*"], format="pack-quantized")
    mlp = {**mlp, "targets": ["re:.*mlp.*"], "format": "pack-quantized"}
    qc.update(format="mixed-precision", config_groups={"attn": attn, "mlp": mlp})
    config = json.loads((float_dir / "config.json").read_text())
    deq = {n: (a if ".self_attn." in n else b).dequantized[n] for n in a.dequantized}
    return QuantBuild(write_quant_dir(float_dir, dst, config, qc, stored), deq, a.quantized, qc)


def test_mixed_precision_groups_each_keep_their_values(float_dir, tmp_path):
    build = mixed_precision(float_dir, tmp_path / "mixed")
    table = model_source(build.path).open_weights()
    assert {m.scheme.split()[-1] for m in table.modules.values()} == {"attn", "mlp"}
    for name in build.quantized:
        assert torch.allclose(table.get(name), build.dequantized[name], rtol=0, atol=1e-7), name
    table.close()
    report = run_checks(build.path, select=["QNT", *STATIC_CATEGORIES])
    no_crashes(report)
    assert problems(report) == []          # no false QNT002 on the 8-bit MLP
    summary = next(f for f in report.findings if f.check == "QNT012")
    assert [(g["group"], g["bits"], g["group_size"]) for g in summary.evidence["groups"]] == [
        ("attn", 4, 32), ("mlp", 8, None)]
    ours = Engine.from_pretrained(build.path).logits(IDS)
    theirs = hf_logits(load_hf_model(float_copy(build, tmp_path / "oracle")), IDS)
    assert (ours - theirs).abs().max().item() <= TOL


def test_mixed_precision_group_fault_is_found_in_its_group(float_dir, tmp_path):
    """The MLP group declared 4-bit over 8-bit tensors: QNT002 names the MLP modules, not the attention."""
    build = mixed_precision(float_dir, tmp_path / "mixed")
    path = edited(build.path, tmp_path / "bad",
                  lambda qc: qc["config_groups"]["mlp"]["weights"].__setitem__("num_bits", 4))
    report = run_checks(path, select=["QNT002"])
    hits = [f for f in report.findings if f.check == "QNT002"]
    assert hits and all(".mlp." in m for f in hits for m in f.evidence.get("modules", [f.evidence["tensor"]]))
    assert engine_outcome(path) == "invalid"


def test_g_idx_past_the_last_group(built, tmp_path, dir_snapshot):
    """check: a QNT005 finding, no crashed check, the engine-backed checks skipped with the engine's one
    line; the engine: a one-line ModelDirError naming the tensor."""
    path = tmp_path / "model"
    shutil.copytree(built("gptq_v1_b4_g32_asym_descact").path, path)
    state = load_file(str(path / "model.safetensors"))
    state[f"{ATTN}.g_idx"][5] = 99
    save_file(state, str(path / "model.safetensors"))
    before = dir_snapshot(path)
    with pytest.raises(ModelDirError) as e:
        Engine.from_pretrained(path)
    assert f"{ATTN}.g_idx" in str(e.value) and "\n" not in str(e.value) and "column 5" in str(e.value)
    report = run_checks(path, device="cpu", quick=True)
    no_crashes(report)
    assert [f.check for f in report.findings if f.severity.value == "error"] == ["QNT005"]
    engine_skips = [c.reason for c in report.checks if c.status == "skipped" and "g_idx" in (c.reason or "")]
    assert engine_skips and all("\n" not in r for r in engine_skips)
    assert dir_snapshot(path) == before


@pytest.mark.parametrize("preset, overrides", [("qwen2", {}), ("llama", {"attention_bias": True})])
def test_gptq_biases_are_applied(preset, overrides, tmp_path):
    """AutoGPTQ's layout: a .bias on every quantized linear — the model's own where the architecture has one
    (Qwen2's q/k/v; a Llama with attention_bias: q/k/v/o), zeros elsewhere. Logits equal transformers on the
    oracle's weights, and differ when the real biases are zeroed (so they were applied)."""
    src = build_model_dir(tmp_path / "float", preset, seed=6, initializer_range=0.06, **overrides)
    build = gptq(src, tmp_path / "q", bits=8, group_size=32, bias={})
    real = [n for n in load_file(str(build.path / "model.safetensors")) if n.endswith(".bias")
            and n in build.dequantized]
    assert real and all(build.dequantized[n].abs().max() > 0 for n in real)
    ours = Engine.from_pretrained(build.path).logits(IDS)
    theirs = hf_logits(load_hf_model(float_copy(build, tmp_path / "oracle")), IDS)
    assert (ours - theirs).abs().max().item() <= TOL
    state = load_file(str(build.path / "model.safetensors"))
    state.update({n: torch.zeros_like(state[n]) for n in real})
    save_file(state, str(build.path / "model.safetensors"))
    assert (Engine.from_pretrained(build.path).logits(IDS) - ours).abs().max().item() > 100 * TOL
    report = run_checks(build.path, select=["QNT", *STATIC_CATEGORIES])
    assert problems(report) == []


def test_extra_nonzero_bias_is_skipped_as_loaders_do_and_flagged(float_dir, tmp_path):
    """A nonzero bias on a Llama down_proj (no slot for it): the engine skips it as transformers and vLLM do
    (same logits as the zero-bias checkpoint, the same products), QNT013 warns; zeros are a note."""
    zero = gptq(float_dir, tmp_path / "zero", bias={})
    odd = gptq(float_dir, tmp_path / "odd", bias={f"{MLP0}.bias": torch.full((64,), 0.5)})
    assert torch.equal(Engine.from_pretrained(zero.path).logits(IDS), Engine.from_pretrained(odd.path).logits(IDS))
    fired = {(f.check, f.severity.value) for f in run_checks(odd.path, select=["QNT", "weights"]).findings}
    assert ("QNT013", "warning") in fired and not any(c == "WGT002" for c, _ in fired)
    fired = {(f.check, f.severity.value) for f in run_checks(zero.path, select=["QNT", "weights"]).findings}
    assert ("QNT013", "info") in fired and not [f for f in fired if f[1] != "info"]


JUNK = [10 ** 9, -1, 0, 3, 1.5, "4", None, True, [], {}, [[4]], {"a": 1}, "", 2 ** 63, float("nan"), "re:(",
        {"group_0": 5}]
DECLARED = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True, "checkpoint_format": "gptq"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"},
    "compressed-tensors": {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                           "config_groups": {"g": {"targets": ["Linear"], "weights": {
                               "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}}},
    "fp8": {"quant_method": "fp8", "weight_block_size": [32, 32], "activation_scheme": "dynamic"},
    "bitsandbytes": {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
}


@pytest.mark.parametrize("method", list(DECLARED))
def test_the_reader_turns_junk_into_problems_never_exceptions(method):
    """Every key any producer writes, set to junk: read_declaration returns (scheme, one-line problems) and the
    per-module questions answer; nothing raises (the fuzz test's QNT001 relies on it)."""
    from reference_engine.files.quant.declaration import read_declaration
    keys = {k for d in DECLARED.values() for k in d} | {"dynamic", "modules_to_not_convert", "ignore", "lm_head",
                                                        "sparsity_config", "load_in_8bit", "kv_cache_scheme"}
    edits = [(key, value) for key in sorted(keys - {"quant_method"}) for value in JUNK]
    if method == "compressed-tensors":
        edits += [(f"weights.{sub}", value) for sub in ("num_bits", "group_size", "strategy", "block_structure",
                                                        "type", "symmetric", "actorder") for value in JUNK]
        edits += [(f"group.{sub}", value) for sub in ("targets", "format") for value in JUNK]
    flagged, own = 0, 0
    for key, value in edits:
        qc = json.loads(json.dumps(DECLARED[method]))
        where, _, sub = key.partition(".")
        target = qc if not sub else qc["config_groups"]["g"]["weights"] if where == "weights" else \
            qc["config_groups"]["g"]
        target[sub or key] = value
        scheme, found = read_declaration(qc)
        assert scheme is not None and all("\n" not in p.message and p.message for p in found)
        for prefix in (ATTN, "lm_head"):
            (scheme.bits_for(prefix), scheme.group_for(prefix), scheme.sym_for(prefix), scheme.fmt_for(prefix),
             scheme.block_for(prefix), scheme.excluded(prefix), scheme.targeted(prefix))
        if sub or key in DECLARED[method]:
            own, flagged = own + 1, flagged + bool(found)
    assert flagged > own // 3               # junk in the method's own keys is noticed, not only survived
