"""The pure analyses behind `llmdoctor diff`: llama-perplexity's KL statistics (checked against a direct
per-position computation and llama.cpp's formulas), its chunking, tensor matching across naming schemes."""
from __future__ import annotations

import math

import pytest
import torch

from checks.diff.kld import KLDAccumulator, chunks, first_scored, format_llama, percentile
from checks.diff.tensor_stats import compare, match_roles, role_of, to_db
from checks.diff.text import first_span, unified


def test_kld_statistics_match_a_direct_computation():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(300, 50, generator=gen) * 3
    b = a + 0.3 * torch.randn(300, 50, generator=gen)
    targets = torch.randint(0, 50, (300,), generator=gen).tolist()
    acc = KLDAccumulator()
    acc.add(a[:120], b[:120], targets[:120])   # two chunks accumulate like one
    acc.add(a[120:], b[120:], targets[120:])
    s = acc.result()
    p, q = torch.log_softmax(a.double(), -1), torch.log_softmax(b.double(), -1)
    kld = (p.exp() * (p - q)).sum(-1)
    t = torch.tensor(targets)
    nll, nll_base = -q[torch.arange(300), t], -p[torch.arange(300), t]
    dp = (-nll).exp() - (-nll_base).exp()
    assert s["positions"] == 300
    assert s["kld_mean"] == pytest.approx(float(kld.mean()), rel=1e-9)
    assert s["kld_unc"] == pytest.approx(float(kld.std(unbiased=False)) / math.sqrt(299), rel=1e-9)
    assert s["ppl_cand"] == pytest.approx(math.exp(float(nll.mean())), rel=1e-9)
    assert s["ppl_ref"] == pytest.approx(math.exp(float(nll_base.mean())), rel=1e-9)
    assert s["ln_ppl_ratio"] == pytest.approx(float(nll.mean() - nll_base.mean()), abs=1e-9)
    assert s["dp_rms"] == pytest.approx(math.sqrt(float((dp ** 2).mean())), rel=1e-9)
    assert s["same_top"] == pytest.approx(float((p.argmax(-1) == q.argmax(-1)).double().mean()))
    ks = sorted(kld.tolist())
    assert s["kld_max"] == pytest.approx(ks[-1], rel=1e-9) and s["kld_min"] == pytest.approx(ks[0], rel=1e-7)
    assert s["kld_median"] == pytest.approx(0.5 * (ks[149] + ks[150]))
    assert s["kld_p99"] == pytest.approx(ks[296] + 0.01 * (ks[297] - ks[296]))   # 0.99 * 299 = 296.01
    # the error of ln(PPL ratio) uses the covariance of the two NLL series (highly correlated here)
    var = float(((nll - nll.mean()) - (nll_base - nll_base.mean())).pow(2).mean()) / 299
    assert s["ln_ppl_ratio_unc"] == pytest.approx(math.sqrt(var), rel=1e-6)


def test_llama_format_has_every_line_llama_perplexity_prints():
    acc = KLDAccumulator()
    x = torch.randn(20, 10)
    acc.add(x, x + 0.1, list(range(10)) * 2)
    text = format_llama(acc.result())
    for label in ("Mean PPL(Q)", "Mean PPL(base)", "Cor(ln(PPL(Q)), ln(PPL(base)))", "Mean ln(PPL(Q)/PPL(base))",
                  "Mean PPL(Q)/PPL(base)", "Mean PPL(Q)-PPL(base)", "Mean    KLD:", "Maximum KLD:", "99.9%   KLD:",
                  "99.0%   KLD:", "95.0%   KLD:", "90.0%   KLD:", "Median  KLD:", "10.0%   KLD:", " 5.0%   KLD:",
                  " 1.0%   KLD:", " 0.1%   KLD:", "Minimum KLD:", "Mean    Δp:", "Maximum Δp:", "75.0%   Δp:",
                  "Median  Δp:", "25.0%   Δp:", "Minimum Δp:", "RMS Δp    :", "Same top p:"):
        assert any(line.startswith(label) for line in text.splitlines()), label


def test_identical_logits_give_exact_zeros():
    x = torch.randn(40, 30)
    acc = KLDAccumulator()
    acc.add(x, x.clone(), [1] * 40)
    s = acc.result()
    assert s["kld_mean"] == 0.0 and s["kld_max"] == 0.0 and s["dp_rms"] == 0.0 and s["same_top"] == 1.0
    assert s["ppl_ratio"] == 1.0 and s["ln_ppl_ratio_unc"] == 0.0


def test_candidate_with_a_smaller_vocabulary_has_infinite_kld_where_mass_is_lost():
    ref = torch.zeros(2, 4)
    acc = KLDAccumulator()
    acc.add(ref, torch.zeros(2, 3), [0, 1])
    assert math.isinf(acc.result()["kld_mean"])


def test_chunks_follow_llama_perplexity():
    tokens = list(range(10, 31))             # 21 tokens, n_ctx 8 -> 2 windows, the tail dropped
    windows = chunks(tokens, 8, bos_id=1)
    assert windows == [[1] + list(range(11, 18)), [1] + list(range(19, 26))]
    assert chunks(tokens, 8, None, max_chunks=1) == [list(range(10, 18))]
    assert first_scored(512) == 256           # positions 256..510 scored: 255 per window


def test_percentile_interpolates_like_llama_cpp():
    values = [0.0, 1.0, 2.0, 3.0]
    assert percentile(values, 0.5) == pytest.approx(1.5)
    assert percentile(values, 0.0) == 0.0 and percentile(values, 1.0) == 3.0


def test_roles_match_across_hf_and_gguf_names():
    assert role_of("model.layers.3.self_attn.v_proj.weight") == ("layers.3.self_attn.v_proj.weight", 3)
    assert role_of("blk.3.attn_v.weight") == ("layers.3.self_attn.v_proj.weight", 3)
    assert role_of("token_embd.weight")[0] == role_of("model.embed_tokens.weight")[0]
    pairs, ref_only, cand_only = match_roles(["model.norm.weight", "lm_head.weight",
                                              "model.layers.0.mlp.up_proj.weight"],
                                             ["output_norm.weight", "blk.0.ffn_up.weight"])
    assert [p[0] for p in pairs] == ["norm.weight", "layers.0.mlp.up_proj.weight"]
    assert ref_only == ["lm_head.weight"] and cand_only == []


def test_gguf_names_follow_the_architecture():
    """Diff translates llama.cpp names with the engine's own map, overrides included: in Gemma 3, ffn_norm is
    the pre-feedforward norm and post_attention_norm the post-attention one (in Llama, ffn_norm is the latter)."""
    from reference_engine.files.gguf_arch import ARCHS
    gemma3 = ARCHS["gemma3"]
    assert role_of("blk.2.ffn_norm.weight", gemma3) == ("layers.2.pre_feedforward_layernorm.weight", 2)
    assert role_of("blk.2.post_attention_norm.weight", gemma3) == ("layers.2.post_attention_layernorm.weight", 2)
    assert role_of("blk.2.post_ffw_norm.weight", gemma3) == ("layers.2.post_feedforward_layernorm.weight", 2)
    assert role_of("blk.2.ffn_norm.weight") == ("layers.2.post_attention_layernorm.weight", 2)
    hf = ["model.layers.0.pre_feedforward_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"]
    gguf = ["blk.0.post_attention_norm.weight", "blk.0.ffn_norm.weight"]
    pairs, ref_only, cand_only = match_roles(hf, gguf, cand_arch=gemma3)
    assert [(a, b) for _, a, b in pairs] == list(zip(hf, reversed(gguf))) and not ref_only and not cand_only


@pytest.mark.assets
def test_real_gemma3_gguf_names_all_pair_with_its_hugging_face_names(gemma3_270m_dir):
    from safetensors import safe_open

    from reference_engine.files.gguf_arch import ARCHS, EXTRA_TENSORS
    from reference_engine.files.gguf_file import GGUFFile
    from tests import assets
    with safe_open(str(gemma3_270m_dir / "model.safetensors"), "pt") as f:
        hf = list(f.keys())
    gguf = [n for n in GGUFFile.open(assets.gemma3_270m_gguf()).tensors if n not in EXTRA_TENSORS]
    pairs, ref_only, cand_only = match_roles(hf, gguf, cand_arch=ARCHS["gemma3"])
    assert len(pairs) == len(gguf) == len(hf) and not ref_only and not cand_only
    assert ("model.layers.0.pre_feedforward_layernorm.weight", "blk.0.ffn_norm.weight") in [p[1:] for p in pairs]
    # the arch-less (Llama) reading pairs Gemma 3's ffn_norm with the post-attention norm: the wrong tensor
    wrong, _, _ = match_roles(hf, gguf)
    assert ("model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight") in [p[1:] for p in wrong]


def test_tensor_compare():
    a = torch.randn(100, 64)
    assert compare(a, a.clone()) == (0.0, 0.0, 1.0)
    nmse, max_abs, cos = compare(a, a * 1.1)
    assert nmse == pytest.approx(0.01, rel=1e-5) and to_db(nmse) == pytest.approx(-20.0, abs=1e-3)
    assert cos == pytest.approx(1.0) and max_abs == pytest.approx(float(a.abs().max()) * 0.1, rel=1e-5)
    assert to_db(0.0) == float("-inf")


def test_first_span_and_unified_diff():
    span = first_span([1, 2, 3, 4, 5], [1, 2, 9, 9, 5], lambda ids: "|".join(map(str, ids)),
                      lambda ids: "/".join(map(str, ids)))
    assert (span.start_ref, span.ref_ids, span.cand_ids) == (2, [3, 4], [9, 9])
    assert span.ref_text == "3|4" and span.cand_text == "9/9"
    assert first_span([1], [1], str, str) is None
    lines = unified("a\nb\n", "a\nc\n", "reference", "candidate")
    assert "-b" in lines and "+c" in lines
