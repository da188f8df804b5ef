"""The streaming core against the resident one: same logits, one layer at a time, shadows in one pass."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core.engine import CoreEngine
from reference_engine.streaming.streaming_core import StreamingCore
from reference_engine.streaming.sweep import LogitsRequest, logits_many
from reference_engine.engine import Engine
from reference_engine.generate import SamplingParams
from reference_engine.testing.factory import build_model_dir
from tests.same_sums import assert_same_sums

PRESETS = [("llama", {}), ("qwen3", {"tie_word_embeddings": True}), ("qwen2", {}), ("llama", {"shards": 2})]
IDS = list(range(3, 45))


@pytest.fixture(scope="module", params=PRESETS, ids=lambda p: p[0] + ("-sharded" if p[1].get("shards") else ""))
def model(request, tmp_path_factory):
    preset, kw = request.param
    return build_model_dir(tmp_path_factory.mktemp(preset) / "m", preset, seed=3, **kw)


def pair(model, **kw):
    return (CoreEngine.from_pretrained(model, num_blocks=64),
            StreamingCore.from_pretrained(model, num_blocks=64, **kw))


def test_logits_same_sums_in_float32(model):
    resident, streaming = pair(model, head_block_bytes=8192)     # many head blocks on purpose
    want, got = resident.logits(IDS), streaming.logits(IDS)
    assert_same_sums(got, want)          # head in blocks: other GEMM shapes, the same sums (tests/same_sums.py)
    assert streaming.passes == 1
    assert all(layer is None for layer in streaming.weights.layers)     # nothing resident


def test_prefill_and_decode_agree(model):
    # one-row products (the last position, decode) go through gemv, whose result depends on the weight
    # buffer's memory alignment: bit-identity is not promised there, only agreement far inside 1e-4
    resident, streaming = pair(model)
    with resident.scratch(2) as (a, b), streaming.scratch(2) as (c, d):
        x = resident.prefill([a, b], [IDS[:20], IDS[5:30]])
        y = streaming.prefill([c, d], [IDS[:20], IDS[5:30]])
        assert (x - y).abs().max() < 1e-5
        nxt = x.argmax(-1).tolist()
        assert (resident.decode([a, b], nxt) - streaming.decode([c, d], nxt)).abs().max() < 1e-4
        assert resident.cache.length(a) == streaming.cache.length(c) == 21


def test_greedy_generation_same_tokens(model):
    resident = Engine.from_pretrained(model, num_blocks=64)
    streaming = Engine.from_pretrained(model, num_blocks=64, streaming=True)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    want = [o.token_ids for o in resident.generate([IDS[:7], IDS[10:14]], params)]
    assert [o.token_ids for o in streaming.generate([IDS[:7], IDS[10:14]], params)] == want


def test_shadows_match_engines_built_in_that_dtype(model):
    """bfloat16/float16 shadows cast each layer as the pass reaches it: the logits of an engine loaded in that
    dtype, bit for bit, from both the resident and the streaming core; the streaming core does it in one pass."""
    resident, streaming = pair(model)
    requests = [LogitsRequest(IDS), LogitsRequest(IDS[:9], dtype=torch.bfloat16),
                LogitsRequest(IDS, dtype=torch.float16)]
    want = [resident.logits(IDS), CoreEngine.from_pretrained(model, dtype="bfloat16", num_blocks=8).logits(IDS[:9]),
            CoreEngine.from_pretrained(model, dtype="float16", num_blocks=8).logits(IDS)]
    for core in (resident, streaming):
        got = logits_many(core, requests)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    assert streaming.passes == 1


def test_captures_and_replacement_see_the_same_values(model):
    resident, streaming = pair(model)
    seen = {}

    def recorder(tag):
        def hook(layer, module, x):
            seen.setdefault(tag, []).append((layer, module, x.clone()))
            if (layer, module) == (1, "mlp"):
                return x * 2                               # fault injection through the hook
        return hook
    a = resident.logits(IDS, capture=recorder("r"))
    b = streaming.logits(IDS, capture=recorder("s"))
    assert torch.equal(a, b)
    assert [(layer, m) for layer, m, _ in seen["r"]] == [(layer, m) for layer, m, _ in seen["s"]]
    assert all(torch.equal(x, y) for (_, _, x), (_, _, y) in zip(seen["r"], seen["s"]))


def test_each_pass_reads_the_layers_once(model):
    _, streaming = pair(model)
    streaming.logits(IDS[:4])
    one = streaming.reader.bytes_read
    logits_many(streaming, [LogitsRequest(IDS[:4]), LogitsRequest(IDS[:6], dtype=torch.bfloat16)])
    reader = streaming.reader
    layers = sum(reader.info(n).nbytes for n in reader.weights.names if n.startswith("model.layers."))
    assert one >= layers
    assert streaming.reader.bytes_read - one < 2 * one          # two requests, still one read of the layers


def test_bad_token_is_a_value_error(model):
    _, streaming = pair(model)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        logits_many(streaming, [LogitsRequest([10 ** 6])])


@pytest.mark.parametrize("variant", sorted(__import__("tests.reference_engine.core.tiny_families",
                                                      fromlist=["CLASSIC"]).CLASSIC.variants))
def test_every_family_streams_with_the_resident_logits(variant):
    """Gemma (scaled embedding, sandwich norms, soft-capping), Phi-3 (LongRoPE), MoE (router capture): the
    streaming core loads their layers through the same load_layer_weights, so its logits are the resident's."""
    from tests.reference_engine.core.tiny_models import model_dir, random_ids
    path = model_dir(variant)
    ids = random_ids(24)
    resident = CoreEngine.from_pretrained(path, num_blocks=16)
    streaming = StreamingCore.from_pretrained(path, num_blocks=16)
    assert torch.equal(resident.logits(ids), streaming.logits(ids))
    shadow = logits_many(streaming, [LogitsRequest(ids, dtype=torch.bfloat16)])[0]
    assert torch.equal(shadow, CoreEngine.from_pretrained(path, dtype="bfloat16", num_blocks=16).logits(ids))


def test_a_pass_reads_the_lm_head_once_for_all_its_lanes(model):
    """Probes and shadows share one read of every layer and of the head: a second and third lane add only
    their own embedding rows to what a pass reads."""
    streaming = StreamingCore.from_pretrained(model, num_blocks=64, head_block_bytes=8192)
    alone = logits_many(streaming, [LogitsRequest(IDS)])
    one = streaming.reader.bytes_read
    many = logits_many(streaming, [LogitsRequest(IDS), LogitsRequest(IDS, dtype=torch.bfloat16),
                                   LogitsRequest(IDS[:9])])
    info = streaming.reader.info("model.embed_tokens.weight")
    row = info.nbytes // info.shape[0]
    assert streaming.reader.bytes_read - one == one + (len(set(IDS)) + 9) * row
    assert torch.equal(many[0], alone[0]) and streaming.passes == 2


def test_scratch_gives_the_kv_pages_back_when_the_cache_is_empty(model):
    """A long scripted probe writes many K/V slots once; with no sequence left the pools' pages go back to the
    OS (limits.release_pages), and the next step still computes the same logits."""
    streaming = StreamingCore.from_pretrained(model, num_blocks=64)
    first = streaming.logits(IDS)
    with streaming.scratch(4) as seqs:
        streaming.prefill(list(seqs), [IDS * 5] * 4)     # 4 x 210 tokens: most of the 1024-slot pools
    pool = streaming.cache.k_pools[0]
    assert float((pool == 0).float().mean()) > 0.5           # released: its whole pages read as zeros again
    assert torch.equal(streaming.logits(IDS), first)
