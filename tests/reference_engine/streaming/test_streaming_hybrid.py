"""A streamed Qwen3-Next (Gated DeltaNet states, MoE layers beside a dense one) against the resident engine: the
same logits (prefill and decode), each weight read once per pass, and the experts cast into buffers kept from
layer to layer and pass to pass, each expert tensor copied once (no per-expert tensor and no stacked copy made
fresh every layer of every pass: benchmarks/streaming_hybrid.py says what a pass costs)."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core import families
from reference_engine.core.engine import CoreEngine
from reference_engine.core.model_weights import layer_tensor_names
from reference_engine.files.weights import Weights
from reference_engine.streaming.streaming_core import EMBED, HEAD, StreamingCore
from tests.reference_engine.core.tiny_models import model_dir
from tests.same_sums import assert_same_sums

VARIANT = "next_moe_interval"          # layers 0, 2, 3 MoE, layer 1 dense (mlp_only_layers)
IDS = list(range(3, 43))


@pytest.fixture(scope="module")
def pair():
    path = model_dir(VARIANT)
    return CoreEngine.from_pretrained(path), StreamingCore.from_pretrained(path)


def test_streamed_logits_equal_resident(pair):
    resident, streaming = pair
    assert_same_sums(streaming.logits(IDS), resident.logits(IDS))
    with resident.scratch(2) as (a, b), streaming.scratch(2) as (c, d):
        x = resident.prefill([a, b], [IDS[:17], IDS[4:30]])
        y = streaming.prefill([c, d], [IDS[:17], IDS[4:30]])
        assert (x - y).abs().max() < 1e-5
        for _ in range(3):
            nxt = x.argmax(-1).tolist()
            x, y = resident.decode([a, b], nxt), streaming.decode([c, d], nxt)
            assert (x - y).abs().max() < 1e-4


def test_a_pass_reads_each_layer_and_the_head_once(pair):
    _, streaming = pair
    streaming.logits(IDS[:5])                                       # the final norm read and kept
    weights, config = Weights.open(model_dir(VARIANT)), streaming.config
    layers = sum(weights.info(n).nbytes for i in range(config.num_hidden_layers) for n in layer_tensor_names(config, i))
    head = weights.info(EMBED if config.tie_word_embeddings else HEAD).nbytes
    rows = len(IDS) * weights.info(EMBED).nbytes // config.vocab_size
    before, passes = streaming.reader.bytes_read, streaming.passes
    streaming.logits(IDS)
    assert streaming.passes == passes + 1
    assert streaming.reader.bytes_read - before == layers + head + rows


def test_experts_fill_buffers_kept_from_layer_to_layer(pair):
    resident, streaming = pair
    sparse = sorted(families.settings(streaming.config).moe.sparse_layers)
    assert sparse == [0, 2, 3]
    seen = set()
    try:
        for i in sparse:
            with torch.inference_mode():                            # as in a pass (the buffers were made in one)
                w = streaming.layer(i)
            streaming.ahead.clear()                                 # the next layer's reads, queued: not wanted
            for role in ("experts_gate_up", "experts_down"):
                got, want = getattr(w, role), getattr(resident.weights.layers[i], role)
                assert got.data_ptr() == streaming._buffers[role].data_ptr()
                assert torch.equal(got, want)       # copies of the same stored values: no arithmetic
                seen.add((role, got.data_ptr()))
    finally:
        streaming.ahead.clear()
    assert len(seen) == 2                                           # one buffer per role, every MoE layer
