"""Granite 4 from GGUF (`granitehybrid`): tiny transformers-built models (tiny_families.py's two Granite variants: MoE
with a shared MLP, 2 SSM groups; dense, 1 group) converted to F32 by the pinned convert_hf_to_gguf.py give the
safetensors logits and transformers' within 1e-4, the same greedy tokens, and chunked prefill / step decode equal
to one prefill (reference_engine/files/gguf_mamba2.py undoes ssm_a = -exp(A_log), the squeezed conv, the grouped
ssm_norm, the split experts and shared MLP, the q/k permutation; the multipliers come from the metadata).

What the tests build for the converter: SmolLM2's tokenizer (a pre-tokenizer it knows), layer_types in the hub's
spelling ("mamba" / "attention": transformers 5 saves "linear_attention" / "full_attention", which the converter
takes for Mamba2 layers; that file is converted too: GGF035 reports it, the engine reads it by its tensors), and
NoPE attention (the converter turns RoPE off on every hybrid, rope.scaling.finetuned false: llama.cpp runs
Granite 4 so, and a RoPE model would convert to another model).
Three conversions (8-20 s each on a 2-core machine, idle or busy) in a module fixture, set up by the first test
(25-65 s); the tests themselves take 1-10 s each (the `llmdoctor check` ones up to 10 s on a busy machine)."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from llmdoctor.run.runner import run_checks
from reference_engine.core import CoreEngine
from reference_engine.errors import ModelDirError
from tests import assets, assets_gguf
from tests.conftest import _asset
from tests.hf_models import hf_logits
from tests.reference_engine.core.gguf_family_runs import ragged_batch_equals_alone
from tests.reference_engine.core.greedy import greedy, hf_greedy
from tests.reference_engine.core.tiny_models import build

pytestmark = pytest.mark.assets
HUB_SPELLING = {"linear_attention": "mamba", "full_attention": "attention"}
MOE, DENSE = "granite4_moe_rope", "granite4_dense_nope_1group"
ENGINE_CHECKS = {"ENG001", "ENG002", "ENG010", "ENG011", "ENG012", "ENG013", "GLD002", "KVC003", "NUM001"}


def hub_spelling(hf_dir) -> None:
    config = json.loads((hf_dir / "config.json").read_text())
    config["layer_types"] = [HUB_SPELLING.get(t, t) for t in config["layer_types"]]
    (hf_dir / "config.json").write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """variant -> (Hugging Face dir, GGUF); "as_saved" -> the MoE model converted from transformers 5's spelling."""
    root, tok = tmp_path_factory.mktemp("granite_gguf"), _asset(assets.smollm2_dir)
    out = {}
    for variant in (MOE, DENSE):
        hf_dir = build(root / variant, variant, tokenizer_dir=tok, position_embedding_type="nope")   # Granite 4's
        if variant == MOE:
            out["as_saved"] = _asset(assets_gguf.convert_hf_dir, hf_dir, root / "as-saved.gguf")
        hub_spelling(hf_dir)
        out[variant] = hf_dir, _asset(assets_gguf.convert_hf_dir, hf_dir, root / f"{variant}.gguf")
    return out


@pytest.mark.parametrize("variant", [MOE, DENSE])
def test_gguf_logits_and_greedy_equal_safetensors_and_transformers(converted, variant):
    import transformers
    hf_dir, path = converted[variant]
    ours, ref = CoreEngine.from_pretrained(path), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.raw["layer_types"] == ref.config.raw["layer_types"]
    a, b = ours.config.family.settings, ref.config.family.settings        # the multipliers, from the metadata
    assert (a.scales.embed, a.attention.scale, a.scales.residual, a.scales.logits_divisor) == \
        pytest.approx((b.scales.embed, b.attention.scale, b.scales.residual, b.scales.logits_divisor), rel=1e-6)
    assert (a.moe, a.positions.nope_layers, a.mamba.heads, a.mamba.groups) == \
        (b.moe, b.positions.nope_layers, b.mamba.heads, b.mamba.groups)
    ids = torch.randint(3, 49000, (120,), generator=torch.Generator().manual_seed(0)).tolist()
    x, y = ours.logits(ids), ref.logits(ids)
    hf = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    theirs = hf_logits(hf, ids)
    print(f"\n{variant}: GGUF vs safetensors {(x - y).abs().max().item():.2e}, "
          f"vs transformers {(x - theirs).abs().max().item():.2e}")
    assert (x - y).abs().max().item() <= 1e-5 and (x - theirs).abs().max().item() <= 1e-4
    assert theirs.std() > 0.05
    prompt = ids[:30]
    assert greedy(ours, prompt, 16) == hf_greedy(hf, prompt, 16)


@pytest.mark.parametrize("variant", [MOE, DENSE])
def test_gguf_chunked_prefill_and_step_decode_equal_one_prefill(converted, variant):
    eng = CoreEngine.from_pretrained(converted[variant][1], block_size=4)
    ids = torch.randint(3, 49000, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    full = eng.logits(ids)
    with eng.scratch() as (seq,):
        rows = [eng.prefill([seq], [ids[i:i + 7]], all_logits=True) for i in range(0, 33, 7)]
        rows += [eng.decode([seq], [t]) for t in ids[35:]]               # then the last 5 one token at a time
    assert (torch.cat(rows) - full).abs().max().item() <= 1e-4
    from reference_engine.streaming.streaming_core import StreamingCore
    assert (StreamingCore.from_pretrained(converted[variant][1]).logits(ids) - full).abs().max().item() <= 1e-5


def test_gguf_from_transformers_5_spelling_is_reported_and_read_by_its_tensors(converted):
    """transformers 5's "full_attention" spelling converts with head_count_kv 0 on every layer, layer 1's attention
    tensors beside (unpermuted: the converter's Mamba2 path wrote them): llama.cpp refuses that file, GGF035 says
    so, and the engine reads layer 1 as the attention layer its tensors are: the same model as the good file."""
    hf_dir, good = converted[MOE]
    eng = CoreEngine.from_pretrained(converted["as_saved"])
    assert eng.config.raw["layer_types"] == ["mamba", "attention", "mamba", "mamba"]
    ids = torch.randint(3, 49000, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    assert (eng.logits(ids) - CoreEngine.from_pretrained(hf_dir).logits(ids)).abs().max().item() <= 1e-5
    report = run_checks(converted["as_saved"], select=["GGF035", "ENG001"])
    assert [(f.check, f.severity.value) for f in report.findings] == [("GGF035", "error")]
    assert "layer 1 holds attention tensors" in report.findings[0].message
    assert {c.id: c.status for c in report.checks} == {"GGF035": "failed", "ENG001": "passed"}
    healthy = run_checks(good, select=["GGF035"])
    assert healthy.findings == [] and {c.status for c in healthy.checks} == {"passed"}


def test_gguf_counting_a_layer_attention_without_its_tensors_is_refused_in_one_line(converted, tmp_path):
    """head_count_kv 2 on Mamba2 layer 0 (its tensors are ssm_*): no model to read; one line, and GGF035."""
    from gguf import GGUFReader
    path = tmp_path / "kinds.gguf"
    shutil.copy(converted[MOE][1], path)
    reader = GGUFReader(path, "r+")
    field = reader.fields["granitehybrid.attention.head_count_kv"]
    for i, value in zip(field.data, [2, 2, 0, 0]):
        field.parts[i][0] = value
    reader.data.flush()
    del reader
    with pytest.raises(ModelDirError) as e:
        CoreEngine.from_pretrained(path)
    assert "layer 0: granitehybrid.attention.head_count_kv 2" in str(e.value) and "\n" not in str(e.value)
    report = run_checks(path, select=["GGF035", "ENG"])
    assert [(f.check, f.severity.value) for f in report.findings] == [("GGF035", "error")]
    assert {c.id: c.status for c in report.checks if c.id in ("GGF035", "ENG001")} == {"GGF035": "failed",
                                                                                      "ENG001": "skipped"}


@pytest.mark.parametrize("variant", [MOE, DENSE])
def test_llmdoctor_check_on_the_gguf_runs_the_engine_checks_cleanly(converted, variant):
    """The engine checks (self-tests, golden, KV, numerics) with the GGUF, config, weight and MoE checks."""
    report = run_checks(converted[variant][1], quick=True, select=["GGF", "config", "weights", *ENGINE_CHECKS])
    statuses = {c.id: c.status for c in report.checks}
    assert {i: statuses[i] for i in ENGINE_CHECKS} == dict.fromkeys(ENGINE_CHECKS, "passed")
    assert [f for f in report.findings if f.severity.value in ("error", "warning")] == []
    assert not [c for c in report.checks if c.status == "crashed"]


@pytest.mark.parametrize("variant", [MOE, DENSE])
def test_ragged_batch_from_the_gguf_equals_each_sequence_alone(converted, variant):
    hf_dir, path = converted[variant]
    ragged_batch_equals_alone(path, hf_dir)
