"""Quantized safetensors under a memory budget: the plan counts the stored (quantized) bytes a pass reads and
the dequantized elements the compute copy holds, and the streaming core reads every quantized weight through
the same table, giving the resident engine's logits (the same sums; the LM head in other row blocks: held to
tests/same_sums.py's tolerance, not to bit-identity)."""
from __future__ import annotations

import re

import pytest
from safetensors import safe_open

from llmdoctor.run.workloads import CHECK_QUICK
from reference_engine.budget.model_sizes import model_sizes
from reference_engine.budget.plan import GiB, make_plan
from reference_engine.readers.quant_reader import QuantChunkedWeights
from reference_engine.streaming.streaming_core import StreamingCore
from reference_engine.core.engine import CoreEngine
from reference_engine.engine import Engine
from reference_engine.generate import SamplingParams
from reference_engine.testing.factory import build_model_dir
from tests.quant_builders import build_variant
from tests.same_sums import assert_same_sums

WIDE = {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
        "num_key_value_heads": 2}
IDS = list(range(3, 45))


@pytest.fixture(scope="module", params=["gptq_v1_b4_g32_asym_descact", "ct_w4a16_group_asym", "bnb_nf4_dq"])
def quant_dir(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("quant-stream")
    src = build_model_dir(root / "float", "llama", seed=2, **WIDE)
    return build_variant(request.param, src, root / request.param).path


def stored_layer_bytes(path) -> list[int]:
    """Bytes of every stored tensor of each decoder layer, from the safetensors header (the oracle), but the
    per-module metadata read once when the table opens (compressed-tensors weight_shape, bitsandbytes'
    quant_state JSON)."""
    out: dict[int, int] = {}
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        for name in f.keys():
            m = re.match(r"model\.layers\.(\d+)\.", name)
            if m and not name.endswith(".weight_shape") and ".quant_state." not in name:
                t = f.get_slice(name)
                n = 1
                for d in t.get_shape():
                    n *= d
                size = {"I32": 4, "F32": 4, "F16": 2, "BF16": 2, "U8": 1, "I8": 1, "F8_E4M3": 1, "I64": 8}[
                    t.get_dtype()]
                out[int(m.group(1))] = out.get(int(m.group(1)), 0) + n * size
    return [out[i] for i in sorted(out)]


def test_sizes_are_the_stored_bytes_and_the_dequantized_elements(quant_dir):
    sizes = model_sizes(quant_dir)
    assert sizes.layer_files == stored_layer_bytes(quant_dir)
    h, i = WIDE["hidden_size"], WIDE["intermediate_size"]
    kv = 2 * h // WIDE["num_attention_heads"]         # 2 kv heads of head_dim 64
    assert sizes.layer_elems == [2 * h * h + 2 * kv * h + 3 * h * i + 2 * h] * WIDE["num_hidden_layers"]
    assert sum(sizes.layer_files) < sum(sizes.layer_elems) * 4 / 5            # ~4.5 bits per weight, not 32
    assert sizes.quant_scratch > 0 and sizes.dequant_bytes(1000, 4) == 1000 * sizes.quant_scratch


def test_streams_under_a_budget_with_the_same_logits(quant_dir):
    full = make_plan(quant_dir, 64 * GiB, workload=CHECK_QUICK)
    assert full.mode == "resident" and full.streaming_peak_bytes < full.resident_peak_bytes
    plan = make_plan(quant_dir, full.streaming_peak_bytes, workload=CHECK_QUICK)
    assert plan.streaming and plan.predicted_peak_bytes <= plan.budget_bytes
    assert plan.bytes_per_pass == sum(stored_layer_bytes(quant_dir)) + model_sizes(quant_dir).head_file_bytes
    resident = CoreEngine.from_pretrained(quant_dir, num_blocks=64)
    streaming = StreamingCore.from_pretrained(quant_dir, num_blocks=64, head_block_bytes=8192)
    assert isinstance(streaming.reader, QuantChunkedWeights)
    assert_same_sums(streaming.logits(IDS), resident.logits(IDS))     # head in 8-row blocks vs one product
    layers_read = streaming.reader.bytes_read
    assert layers_read >= sum(stored_layer_bytes(quant_dir))            # every quantized part, once a pass


def test_greedy_generation_same_tokens_streaming(quant_dir):
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    want = [o.token_ids for o in Engine.from_pretrained(quant_dir, num_blocks=64).generate([IDS[:7]], params)]
    got = Engine.from_pretrained(quant_dir, num_blocks=64, streaming=True).generate([IDS[:7]], params)
    assert [o.token_ids for o in got] == want
