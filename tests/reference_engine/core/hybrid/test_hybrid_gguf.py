"""LFM2 from GGUF: a tiny LFM2 (with SmolLM2's tokenizer, which llama.cpp's converter recognises) converted by the
pinned convert_hf_to_gguf.py to F32 gives the safetensors logits exactly (per-layer head_count_kv -> layer_types,
shortconv taps [C, K] -> [C, 1, K], token_embd_norm -> model.embedding_norm). Granite 4 (granitehybrid):
test_granite_gguf.py. ~25 s on a loaded 2-core machine: the converter runs once."""
from __future__ import annotations


import pytest

from reference_engine.core import CoreEngine
from tests.assets import or_fail, smollm2_dir
from tests.assets_gguf import convert_hf_dir
from tests.reference_engine.core.gguf_family_runs import check_is_clean, ragged_batch_equals_alone
from tests.reference_engine.core.tiny_models import build, random_ids


@pytest.fixture(scope="module")
def lfm2_pair(tmp_path_factory):
    tokenizer_dir = or_fail(smollm2_dir)      # an asset that cannot be fetched fails the test: never a skip
    out = build(tmp_path_factory.mktemp("lfm2") / "hf", "lfm2_conv3_attn1", tokenizer_dir=tokenizer_dir)
    return out, convert_hf_dir(out, out.parent / "lfm2-f32.gguf")


def test_lfm2_gguf_logits_equal_safetensors(lfm2_pair):
    hf_dir, gguf = lfm2_pair
    ours, theirs = CoreEngine.from_pretrained(gguf), CoreEngine.from_pretrained(hf_dir)
    assert ours.config.raw["layer_types"] == ["conv", "full_attention", "conv", "conv"]
    ids = [i * 613 % 49000 + 100 for i in random_ids(60, seed=5)]
    assert (ours.logits(ids) - theirs.logits(ids)).abs().max().item() <= 1e-5
    with ours.scratch() as (seq,):                               # chunked through the GGUF engine's states
        ours.prefill([seq], [ids[:25]])
        last = ours.prefill([seq], [ids[25:]])
    assert (last[0] - theirs.logits(ids)[-1]).abs().max().item() <= 1e-4


def test_ragged_batch_from_the_lfm2_gguf_equals_each_sequence_alone(lfm2_pair):
    """Each sequence's short-conv state apart in one prefill."""
    ragged_batch_equals_alone(lfm2_pair[1], lfm2_pair[0])


def test_check_on_the_lfm2_gguf_is_clean(lfm2_pair):
    check_is_clean(lfm2_pair[1])
