"""The one read-ahead (reference_engine/readers/read_ahead.py), as the streaming core's layer reads and the weight
scan's row blocks use it: what is taken equals a plain read, buffers are reused, a read's error reaches the
caller, and a block asked for out of order is still right."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from checks.shared.weights.tensor_scan import BlockReads, row_spans
from reference_engine.errors import ModelDirError
from reference_engine.files.weights import Weights
from reference_engine.readers.layer_reader import ChunkedWeights
from reference_engine.readers.read_ahead import ReadAhead


@pytest.fixture()
def weights(tmp_path):
    gen = torch.Generator().manual_seed(0)
    tensors = {f"layer.{i}.w": torch.randn(48, 16, generator=gen) for i in range(3)}
    tensors["half"] = torch.randn(40, 8, generator=gen).to(torch.bfloat16)
    tensors["ints"] = torch.arange(60, dtype=torch.int8).reshape(6, 10)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return Weights.open(tmp_path), tensors


def test_layers_read_ahead_equal_plain_reads_into_reused_buffers(weights):
    table, tensors = weights
    reader = ChunkedWeights(table)
    reader.ahead = ReadAhead()
    try:
        reader.queue(["layer.0.w", "half"])
        first = reader.get("layer.0.w")
        assert torch.equal(first, tensors["layer.0.w"]) and torch.equal(reader.get("half"), tensors["half"])
        pointer = first.data_ptr()
        reader.queue(["layer.1.w"])             # slot 0 again: the same buffer, read into
        second = reader.get("layer.1.w")
        assert torch.equal(second, tensors["layer.1.w"]) and second.data_ptr() == pointer
        assert not reader.ahead.queued("layer.2.w")
        assert torch.equal(reader.get("layer.2.w"), tensors["layer.2.w"])    # not queued: read there and then
    finally:
        reader.ahead.close()
        reader.close()


def test_a_read_error_reaches_the_caller_and_clear_forgets_what_was_queued():
    ahead = ReadAhead()

    def broken(out):
        raise ModelDirError("model.safetensors", "tensor 'w': cannot read: file ended early")
    try:
        ahead.queue("w", broken, 0, 8)
        with pytest.raises(ModelDirError, match="file ended early"):
            ahead.take("w")
        ahead.queue("v", lambda out: out[:4].fill_(7), 0, 8)
        ahead.clear()
        assert not ahead.queued("v") and ahead.take("v") is None
    finally:
        ahead.close()


@pytest.mark.parametrize("chunk", [16, 100, 1 << 20])
def test_scan_blocks_read_ahead_equal_the_tensors_in_and_out_of_order(weights, chunk):
    table, tensors = weights
    order = [(table.info(name), *span) for name in tensors for span in row_spans(table.info(name), chunk)]
    assert len(order) > len(tensors) or chunk > 1000
    blocks = BlockReads(table, order)
    try:
        for info, first, rows, per_row in order + order[::-1]:         # in order, then every block out of order
            expected = tensors[info.name].reshape(info.shape[0], -1)[first:first + rows].float()
            assert torch.equal(blocks.read(info, first, rows, per_row), expected)
    finally:
        blocks.close()


def test_row_spans_cover_every_row_once():
    class Info:
        shape = (10, 3, 4)
    spans = row_spans(Info, 25)                            # 12 values a row: 2 rows a block
    assert spans == [(0, 2, 12), (2, 2, 12), (4, 2, 12), (6, 2, 12), (8, 2, 12)]
    Info.shape = (0, 4)
    assert row_spans(Info, 25) == []
