"""GLM-4.5 (Glm4MoeForCausalLM) against transformers' eager path on tiny random-weight models it built: partial
rotary, q/k/v biases, per-head q/k norm, noaux_tc routing with groups and shared experts, dense first layers."""
from __future__ import annotations

import pytest

from reference_engine.core import CoreEngine
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids
from tests.reference_engine.core.greedy import greedy, hf_greedy
from tests.reference_engine.core.mla.test_family_deepseek import TOL, _with

GLM = ["glm45_qknorm_groups_bias", "glm45_plain_one_group"]


@pytest.mark.parametrize("variant", GLM)
def test_logits_greedy_and_ragged_batch_match_transformers(variant):
    eng = CoreEngine.from_pretrained(model_dir(variant), block_size=4)
    ids = random_ids(200, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    assert (ours - theirs).abs().max().item() <= TOL and theirs.std() > 0.3
    prompt = random_ids(30, seed=2)
    assert greedy(eng, prompt, 24) == hf_greedy(hf_model(variant), prompt, 24)
    prompts = [random_ids(n, seed=n) for n in (41, 7, 19)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for i, p in enumerate(prompts):
        assert (rows[i] - hf_logits(hf_model(variant), p)).abs().max().item() <= TOL


@pytest.mark.parametrize("change", [{"moe": {"n_group": 1, "topk_group": 1}}, {"moe": {"routed_scaling": 1.0}},
                                    {"moe": {"method": "softmax_topk"}}])
def test_routing_features_change_the_logits(change):
    eng = CoreEngine.from_pretrained(model_dir("glm45_qknorm_groups_bias"))
    right = eng.logits(random_ids(200, seed=1))
    assert (_with(eng, **change) - right).abs().max().item() > 100 * TOL


def test_partial_rotary_defaults_to_half_as_glm4moe_config():
    """A config.json without partial_rotary_factor runs with 0.5, as Glm4MoeConfig assumes."""
    from reference_engine.config import parse_config
    from reference_engine.core.rope import rope_parameters, rotary_dim
    config = parse_config({"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 64, "num_attention_heads": 4,
                           "num_hidden_layers": 1, "vocab_size": 10, "intermediate_size": 8})
    assert rotary_dim(config, rope_parameters(config)) == 8
