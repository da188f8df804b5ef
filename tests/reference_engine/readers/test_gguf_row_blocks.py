"""GGUF tensors read a block of rows at a time (GGF008, the weight scan, the EMB rows): the same values as a whole
dequantization, never more than the block held."""
from __future__ import annotations

import os

import torch

from checks.shared.weights.tensor_scan import scan_weights
from reference_engine.readers import gguf_reader
from reference_engine.files.gguf_file import GGUFFile
from reference_engine.files.gguf_weights import GGUFWeights, dequantize
from tests.checks.zoo_gguf import healthy


def test_row_blocks_equal_a_whole_dequantization(tmp_path):
    path = healthy(tmp_path)
    gguf = GGUFFile.open(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        for t in gguf.tensors.values():
            cols = t.dims[0]
            blocks = list(gguf_reader.row_blocks(fd, path, t, max_elements=3 * cols))
            assert all(b.shape[0] <= 3 for _, b in blocks)
            whole = dequantize(gguf, t).reshape(-1, cols)
            assert torch.equal(torch.cat([b for _, b in blocks]).to(whole.dtype), whole), t.name
    finally:
        os.close(fd)


def test_the_weight_scan_of_a_gguf_reads_blocks_and_agrees(tmp_path):
    weights = GGUFWeights.open(healthy(tmp_path))
    small = scan_weights(weights, chunk_elements=64)          # a few rows per block: every path exercised
    for name in weights.names:
        t = weights.get(name).float()
        stats = small.tensors[name]
        assert abs(stats.amax - float(t.abs().max())) <= 1e-6 * max(1.0, stats.amax), name
        assert abs(stats.sumsq - float(t.double().square().sum())) <= 1e-5 * max(1.0, stats.sumsq), name
    embed = next(n for n in weights.names if "embed" in n)
    full = weights.get(embed).float()
    assert torch.allclose(small.rows[embed].norms.float(), full.norm(dim=1), rtol=1e-5)
