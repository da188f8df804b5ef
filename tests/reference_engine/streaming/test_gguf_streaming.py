"""The streaming core on GGUF files: the same logits as the resident GGUF engine, quantized
bytes read row block by row block (gguf's own reader and kernels are the oracle for which bytes and values)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from gguf.quants import dequantize

from reference_engine.core.engine import CoreEngine
from reference_engine.readers.gguf_reader import GGUFChunkedWeights, row_bytes
from reference_engine.streaming.streaming_core import StreamingCore
from reference_engine.streaming.sweep import LogitsRequest, logits_many
from reference_engine.engine import Engine
from reference_engine.files.gguf_weights import GGUFWeights
from reference_engine.generate import SamplingParams
from tests import assets
from tests.checks.zoo_gguf import F32, Q8_0, export_spec, write_spec
from tests.same_sums import assert_same_sums
from tests.conftest import _asset

IDS = list(range(3, 45))
EMBED = "model.embed_tokens.weight"


@pytest.fixture(scope="module", params=[("llama", F32), ("llama", Q8_0), ("qwen3", Q8_0)],
                ids=lambda p: f"{p[0]}-{p[1].name}")
def gguf(request, tmp_path_factory):
    preset, quant = request.param
    return write_spec(export_spec(preset, quant=quant), tmp_path_factory.mktemp("gguf") / "model.gguf")


def test_logits_same_sums_as_the_resident_gguf_engine(gguf):
    resident = CoreEngine.from_pretrained(gguf, num_blocks=64)
    streaming = StreamingCore.from_pretrained(gguf, num_blocks=64, head_block_bytes=8192)   # many head blocks
    assert isinstance(streaming.reader, GGUFChunkedWeights)
    assert_same_sums(streaming.logits(IDS), resident.logits(IDS))        # head blocks: tests/same_sums.py
    assert streaming.passes == 1 and all(layer is None for layer in streaming.weights.layers)
    shadow = logits_many(streaming, [LogitsRequest(IDS[:9], dtype=torch.bfloat16)])[0]
    assert_same_sums(shadow, CoreEngine.from_pretrained(gguf, dtype="bfloat16", num_blocks=8).logits(IDS[:9]),
                     torch.bfloat16)


def test_greedy_generation_same_tokens(gguf):
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    want = [o.token_ids for o in Engine.from_pretrained(gguf, num_blocks=64).generate([IDS[:7], IDS[10:14]], params)]
    got = Engine.from_pretrained(gguf, num_blocks=64, streaming=True).generate([IDS[:7], IDS[10:14]], params)
    assert [o.token_ids for o in got] == want


def test_every_tensor_equals_the_resident_dequantization(gguf):
    weights, reader = GGUFWeights.open(gguf), GGUFChunkedWeights(GGUFWeights.open(gguf))
    for name in weights.names:                      # Q/K un-permutation included
        assert torch.equal(reader.get(name), weights.get(name)), name
    assert reader.bytes_read == sum(weights.info(n).nbytes for n in weights.names)


def test_rows_read_only_their_quantized_blocks(gguf):
    ref = {t.name: t for t in GGUFReader(gguf).tensors}["token_embd.weight"]   # data: [rows, row bytes] or values
    reader = GGUFChunkedWeights(GGUFWeights.open(gguf))
    tensor = reader._tensor(EMBED)
    raw = np.asarray(ref.data).reshape(ref.shape[::-1][0], -1)
    if ref.tensor_type.name != "F32":
        assert row_bytes(tensor) == raw.shape[1]
    start, end = 17, 45
    got = reader.rows(EMBED, start, end)
    assert reader.bytes_read == (end - start) * row_bytes(tensor)
    want = raw[start:end] if ref.tensor_type.name == "F32" else dequantize(raw[start:end], ref.tensor_type)
    assert torch.equal(got, torch.from_numpy(np.array(want, dtype=np.float32)))
    ids = torch.tensor([5, 3, 5, 400, 3])
    assert torch.equal(reader.gather_rows(EMBED, ids), GGUFWeights.open(gguf).get(EMBED)[ids])


def test_rows_of_a_reordered_tensor_are_refused(gguf):
    """Q/K rows the converter permuted (llama) cannot be read as a row range; where it did not (qwen3) they are
    the resident rows."""
    reader = GGUFChunkedWeights(GGUFWeights.open(gguf))
    q = "model.layers.0.self_attn.q_proj.weight"
    if reader.weights.arch.permute_qk:
        with pytest.raises(ValueError, match="reordered"):
            reader.rows(q, 0, 4)
    else:
        # the same stored rows read two ways, no arithmetic: bit-identical on any CPU
        assert torch.equal(reader.rows(q, 0, 4), GGUFWeights.open(gguf).get(q)[0:4])


@pytest.mark.assets
def test_smollm2_q4_1_streams_with_the_resident_logits():
    """A real Q4_1 file (tied embedding in Q8_0): one pass reads each quantized layer once and the head's
    blocks, never the whole file twice; logits agree (the LM-head matmul's float32 result may depend on the
    weight buffer's memory alignment, which differs between a numpy-made and a torch-made tensor)."""
    from llmdoctor.run.workloads import CHECK_QUICK
    from reference_engine.budget.plan import GiB, make_plan
    path = _asset(assets.smollm2_gguf)
    resident = CoreEngine.from_pretrained(path, num_blocks=16)
    streaming = StreamingCore.from_pretrained(path, num_blocks=16)
    ids = list(range(100, 140))
    a, b = resident.logits(ids), streaming.logits(ids)
    assert (a - b).abs().max() <= 1e-4 and torch.equal(a.argmax(-1), b.argmax(-1))
    plan = make_plan(path, 64 * GiB, workload=CHECK_QUICK, force="streaming")
    embed_rows = len(set(ids)) * row_bytes(streaming.reader._tensor(EMBED))
    norm = streaming.reader.info("model.norm.weight").nbytes
    assert streaming.reader.bytes_read == plan.bytes_per_pass + embed_rows + norm
