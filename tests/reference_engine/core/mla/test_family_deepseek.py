"""DeepSeek-V2/V3 and Kimi K2 (MLA) against transformers' eager path on tiny random-weight models it built:
fp32 logits within 1e-4 over 200 tokens (past original_max_position_embeddings), 24 greedy tokens through the
paged latent cache identical, a ragged batch equal to each sequence alone; each feature shown to matter."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from reference_engine.core import CoreEngine, families
from reference_engine.core.cache.layout import bytes_per_token
from reference_engine.core.moe import route
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_families import MLA_MOE
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4
MLA_VARIANTS = [v for v in MLA_MOE.variants if not v.startswith("glm")]


def core(variant: str, **kw) -> CoreEngine:
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


@pytest.mark.parametrize("variant", MLA_VARIANTS)
def test_logits_and_greedy_match_transformers(variant):
    eng = core(variant)
    ids = random_ids(200, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL and theirs.std() > 0.3
    prompt = random_ids(30, seed=2)
    assert greedy(eng, prompt, 24) == hf_greedy(hf_model(variant), prompt, 24)
    assert eng.cache.stats().used_blocks == 0


@pytest.mark.parametrize("variant", ["dsv3_qlora_yarn_groups", "dsv2_lite_greedy"])
def test_ragged_batch_and_chunked_prefill_match_each_sequence_alone(variant):
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, prompt in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model(variant), prompt)).abs().max().item() <= TOL
    eng.prefill([3], [prompts[0][:25]])
    last = eng.prefill([3], [prompts[0][25:]])
    assert (last[0] - hf_logits(hf_model(variant), prompts[0])[-1]).abs().max().item() <= TOL
    decoded = eng.decode([0, 1, 2], [5, 6, 7])                  # one decode step for the three at once
    for i, prompt in enumerate(prompts):
        alone = hf_logits(hf_model(variant), prompt + [5 + i])[-1]
        assert (decoded[i] - alone).abs().max().item() <= TOL


def test_cache_holds_the_latent_and_rope_key_per_token():
    """KVLayout(1, kv_lora_rank + qk_rope_head_dim, 0) per layer: (16 + 8) * 4 bytes * 3 layers = 288 bytes a
    token in fp32, against 2 * 4 heads * (20 + 10) / 2 * ... for an expanded K/V (here 3 * 4 * (20 + 10) * 4)."""
    eng = core("dsv3_qlora_yarn_groups")
    layout = families.cache_layout(eng.config)
    assert bytes_per_token(layout, torch.float32) == 3 * (16 + 8) * 4
    assert eng.cache.flat_k(0).shape[1:] == (1, 24) and eng.cache.flat_v(0).shape[1:] == (1, 0)


def _with(eng: CoreEngine, **changes) -> torch.Tensor:
    bound = eng.config.family
    s = bound.settings
    mla = dataclasses.replace(s.mla, **changes.pop("mla", {})) if s.mla else None
    moe = dataclasses.replace(s.moe, **changes.pop("moe", {}))
    eng.config.family = dataclasses.replace(bound, settings=dataclasses.replace(s, mla=mla, moe=moe))
    try:
        return eng.logits(random_ids(200, seed=1))
    finally:
        eng.config.family = bound


@pytest.mark.parametrize("variant", ["dsv3_qlora_yarn_groups", "dsv2_lite_greedy"])
def test_mscale_all_dim_in_the_softmax_scale_matters(variant, monkeypatch):
    """Leaving YaRN's mscale_all_dim out of the softmax scale (transformers#47435-style) moves the logits."""
    from reference_engine.core import mla
    eng = core(variant)
    right = eng.logits(random_ids(200, seed=1))
    assert mla.softmax_mscale(eng.config) != 1.0
    monkeypatch.setattr(mla, "softmax_mscale", lambda config: 1.0)
    assert (eng.logits(random_ids(200, seed=1)) - right).abs().max().item() > 100 * TOL


@pytest.mark.parametrize("variant, change", [
    ("dsv3_qlora_yarn_groups", {"mla": {"interleaved": False}}),              # rope pairs mis-laid
    ("dsv3_qlora_yarn_groups", {"moe": {"n_group": 1, "topk_group": 1}}),     # groups ignored
    ("dsv3_qlora_yarn_groups", {"moe": {"routed_scaling": 1.0}}),
    ("dsv3_qlora_yarn_groups", {"moe": {"norm_topk_prob": False}}),
    ("dsv2_group_limited_bias", {"moe": {"method": "softmax_topk"}}),
])
def test_each_feature_changes_the_logits(variant, change):
    """The models are scaled so that getting any of these wrong moves the logits far past the tolerance."""
    eng = core(variant)
    right = eng.logits(random_ids(200, seed=1))
    assert (_with(eng, **change) - right).abs().max().item() > 100 * TOL


def test_router_bias_changes_the_choice_and_groups_differ_between_tokens():
    eng = core("dsv3_qlora_yarn_groups")
    logits = {}
    eng.logits(random_ids(200, seed=1), capture=lambda i, m, t: logits.setdefault(i, t) if m == "router" else None)
    moe, bias = eng.config.family.settings.moe, eng.weights.layers[1].extra["e_score_correction_bias"]
    _, ids = route(logits[1], moe, bias)
    _, unbiased = route(logits[1], moe, None)
    assert not torch.equal(ids.sort(-1).values, unbiased.sort(-1).values)
    groups = {tuple(sorted(set((row // 2).tolist()))) for row in ids}            # 8 experts in 4 groups
    assert len(groups) >= 3 and all(len(g) <= moe.topk_group for g in groups)


def test_multi_token_prediction_layers_are_skipped_as_transformers_does(tmp_path):
    """DeepSeek-V3 / Kimi K2 checkpoints store num_nextn_predict_layers MTP layers after the decoder
    (model.layers.61 in the real one); the loader and WGT002 leave them aside, as transformers does."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from llmdoctor.run.runner import run_checks
    out = tmp_path / "mtp"
    shutil.copytree(model_dir("dsv3_qlora_yarn_groups"), out)
    weights = load_file(out / "model.safetensors")
    weights.update({k.replace("layers.2.", "layers.3."): v.clone() for k, v in weights.items() if ".layers.2." in k})
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    raw = json.loads((out / "config.json").read_text())
    assert raw["num_nextn_predict_layers"] == 1
    ids = random_ids(50, seed=3)
    # the same tensors through the same engine and shapes in one process: the very same products, bit for bit
    assert torch.equal(CoreEngine.from_pretrained(out).logits(ids), core("dsv3_qlora_yarn_groups").logits(ids))
    report = run_checks(out, select=["WGT002"])
    assert [f.message for f in report.findings if f.severity.value != "info"] == []


def test_streaming_core_runs_mla_with_the_resident_logits():
    """The layer-by-layer (streaming) core loads MLA's own roles (LayerWeights.extra) the same way."""
    from reference_engine.streaming.streaming_core import StreamingCore
    ids = random_ids(40, seed=4)
    path = model_dir("dsv3_qlora_yarn_groups")
    # the streaming core reads the head in row blocks: BLAS may pick another kernel for that shape on another CPU
    torch.testing.assert_close(StreamingCore.from_pretrained(path, num_blocks=16).logits(ids),
                               CoreEngine.from_pretrained(path, num_blocks=16).logits(ids), atol=1e-5, rtol=1e-5)
