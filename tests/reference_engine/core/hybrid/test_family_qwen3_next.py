"""Qwen3-Next and Qwen3.5 text against transformers (tiny random models it built, decays far from 0 and 1,
sequences longer than the conv window and than the delta rule's 64-token chunk): fp32 logits within 1e-4,
greedy equal; and the engine against itself: token-by-token decode, a prefill in pieces and a ragged batch
all equal one prefill of each sequence alone."""
from __future__ import annotations

import pytest
import torch

from reference_engine.config import parse_config
from reference_engine.core import CoreEngine
from reference_engine.core.cache.layout import KVLayout, StateLayout, state_bytes_per_sequence
from reference_engine.core.families import cache_layout, mixers
from reference_engine.core.families.hybrid.qwen3_next import layer_types
from reference_engine.errors import ModelDirError
from tests.hf_models import hf_logits
from tests.reference_engine.core.tiny_families import DELTA_NET
from tests.reference_engine.core.tiny_models import hf_model, model_dir, random_ids
from tests.reference_engine.core.greedy import greedy, hf_greedy

TOL = 1e-4


def core(variant: str, **kw) -> CoreEngine:
    return CoreEngine.from_pretrained(model_dir(variant), **kw)


def decays(variant: str) -> torch.Tensor:
    """exp(g) of every DeltaNet head on a 40-token prompt, as transformers computes it."""
    seen = []
    for layer in hf_model(variant).model.layers:
        if hasattr(layer, "linear_attn"):
            la = layer.linear_attn
            proj = la.in_proj_ba if hasattr(la, "in_proj_ba") else la.in_proj_a
            a = proj(torch.randn(40, 32) * 0.5)[..., -la.num_v_heads:]
            seen.append((-la.A_log.float().exp() * torch.nn.functional.softplus(a + la.dt_bias)).exp())
    return torch.cat([s.flatten() for s in seen]).detach()


@pytest.mark.parametrize("variant", list(DELTA_NET.variants))
def test_logits_over_200_tokens_and_greedy_match_transformers(variant):
    d = decays(variant)
    assert 0.2 < d.min() and d.max() < 0.99 and 0.4 < d.mean() < 0.9      # the state dynamics matter
    eng = core(variant)
    ids = random_ids(200, seed=1)
    ours, theirs = eng.logits(ids), hf_logits(hf_model(variant), ids)
    diff = (ours - theirs).abs().max().item()
    print(f"\n{variant}: max |logit diff| {diff:.2e} (max |logit| {theirs.abs().max():.2f})")
    assert diff <= TOL
    assert theirs.abs().max() > 0.5 and theirs.std() > 0.05
    prompt = random_ids(70, seed=2)
    assert greedy(eng, prompt, 16) == hf_greedy(hf_model(variant), prompt, 16)
    assert eng.cache.stats().used_blocks == 0 and not eng.cache.states.states and eng.validate(ours) == []


@pytest.mark.parametrize("variant", ["next_moe_interval", "qwen35_moe"])
def test_decode_token_by_token_and_prefill_in_pieces_equal_one_prefill(variant):
    eng = core(variant, block_size=8)
    ids = random_ids(150, seed=3)
    whole = eng.logits(ids)
    rows = [eng.prefill(["s"], [ids[:5]])[0]]
    rows += [eng.decode(["s"], [t])[0] for t in ids[5:80]]                 # recurrent form, token by token
    pieces = [eng.prefill(["p"], [ids[a:b]], all_logits=True) for a, b in ((0, 30), (30, 100), (100, 150))]
    assert (torch.stack(rows) - whole[4:80]).abs().max().item() <= TOL
    assert (torch.cat(pieces) - whole).abs().max().item() <= TOL               # chunks split at 30, 64, 100, 128
    eng.free("s"), eng.free("p")


def test_ragged_batch_equals_each_sequence_alone():
    """Three sequences of unequal length in one prefill, then a step mixing a decode with a 20-token chunk:
    no token of one sequence (nor the attention layers' padding) reaches another's state."""
    variant = "next_moe_interval"
    eng = core(variant, block_size=4)
    prompts = [random_ids(n, seed=n) for n in (70, 9, 33)]
    rows = eng.prefill([0, 1, 2], prompts, all_logits=True).split([len(p) for p in prompts])
    for row, prompt in zip(rows, prompts):
        assert (row - hf_logits(hf_model(variant), prompt)).abs().max().item() <= TOL
    more = random_ids(20, seed=4)
    last = eng.prefill([1, 0], [[5], more])
    assert (last[0] - hf_logits(hf_model(variant), prompts[1] + [5])[-1]).abs().max().item() <= TOL
    assert (last[1] - hf_logits(hf_model(variant), prompts[0] + more)[-1]).abs().max().item() <= TOL
    eng.fork(2, 3)                                                           # a beam copies the state
    fork = eng.decode([2, 3], [7, 8])                                        # one decode step for both
    for i, t in enumerate((7, 8)):
        assert (fork[i] - hf_logits(hf_model(variant), prompts[2] + [t])[-1]).abs().max().item() <= TOL
    histories = {0: prompts[0] + more, 1: prompts[1] + [5], 3: prompts[2] + [8]}
    for step in range(4):                                                    # three sequences decoding together
        tokens = [10 + step + s for s in histories]
        rows = eng.decode(list(histories), tokens)
        for row, (s, t) in zip(rows, zip(histories, tokens)):
            histories[s].append(t)
            assert (row - hf_logits(hf_model(variant), histories[s])[-1]).abs().max().item() <= TOL


def test_cache_layout_keeps_kv_for_attention_and_a_state_for_deltanet_layers():
    eng = core("next_moe_interval")
    assert mixers(eng.config) == ("gated_delta_net", "attention", "gated_delta_net", "attention")
    layout = cache_layout(eng.config)
    assert layout[1] == KVLayout(2, 16, 16)
    # conv over q, k (2 heads x 8) and v (4 heads x 12): 80 channels, window K-1 = 3; state [4, 8, 12]
    assert layout[0] == StateLayout((("conv", (80, 3)), ("recurrent", (4, 8, 12))))
    assert state_bytes_per_sequence(layout, torch.float32) == 2 * (80 * 3 + 4 * 8 * 12) * 4
    assert eng.cache.k_pools[0].numel() == 0 and eng.cache.k_pools[1].numel() > 0


def test_layer_kinds_from_the_interval_and_a_bad_layer_types_refused():
    raw = dict(architectures=["Qwen3NextForCausalLM"], vocab_size=10, hidden_size=8, intermediate_size=8,
               num_hidden_layers=6, num_attention_heads=2, full_attention_interval=3)
    assert layer_types(parse_config(raw)) == ["linear_attention", "linear_attention", "full_attention"] * 2
    for bad in (["linear_attention"] * 5, ["linear_attention"] * 5 + ["mamba"]):
        with pytest.raises(ModelDirError, match="layer_types"):
            layer_types(parse_config({**raw, "layer_types": bad}))


def test_bfloat16_follows_transformers_dtype_handling():
    """bf16 weights: the zero-centred norms, the gated norm and the decay in float32 as transformers does them,
    the states kept in float32; logits within a bf16 rounding step of transformers' bf16 run (equal here)."""
    import transformers
    variant = "qwen35_dense_tied"
    eng = core(variant, dtype="bfloat16")
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir(variant), dtype=torch.bfloat16).eval()
    ids = random_ids(150, seed=1)
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor([ids])).logits[0].float()
    assert (eng.logits(ids) - theirs).abs().max().item() <= 1 / 32


def test_partial_rotary_defaults_to_a_quarter_as_transformers_config():
    from reference_engine.core.rope import rope_parameters, rotary_dim
    raw = dict(architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next", vocab_size=10, hidden_size=8,
               intermediate_size=8, num_hidden_layers=4, num_attention_heads=2, head_dim=16)
    config = parse_config(raw)
    assert rotary_dim(config, rope_parameters(config)) == 4
    assert rotary_dim(config, rope_parameters(parse_config({**raw, "partial_rotary_factor": 0.5}))) == 8


def test_beam_search_forks_the_recurrent_state_like_transformers():
    """Beams fork (copy) each sequence's conv window and recurrent state: 3 beams give transformers' tokens."""
    import transformers
    from reference_engine.engine import Engine
    from reference_engine.generate import SamplingParams
    from tests.reference_engine.core.tiny_models import checkable_dir
    d = checkable_dir("qwen35_dense_tied")
    ids = list(range(3, 40))
    ours = Engine.from_pretrained(d).generate([ids], SamplingParams(num_beams=3, max_new_tokens=8, ignore_eos=True,
                                                                     temperature=0))[0].token_ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([ids]), num_beams=3, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                             eos_token_id=None, pad_token_id=0, early_stopping=False, length_penalty=1.0)
    assert ours == theirs[0, len(ids):].tolist()
