"""The weight scan (checks/shared/weights/tensor_scan.py) is bound by reading bytes: its time against a plain read
of the same tensors, block by block, with the same reader and no statistics (the peer, measured in the same run).

    python benchmarks/weight_scan.py [MODEL_DIR] [--repeat 5]

MODEL_DIR defaults to SmolLM2-135M-Instruct from the test assets. Both passes read from the page cache after a
warm-up pass, so the ratio measures the arithmetic on top of the reads, not the disk."""
from __future__ import annotations

import argparse
import math
import sys
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checks.shared.weights.tensor_scan import (  # noqa: E402
    CHUNK_ELEMENTS, TORCH_DTYPES, BlockReads, row_spans, scan_weights)
from reference_engine.files.weights import Weights  # noqa: E402


def read_only(weights) -> None:
    """The peer: every block the scan reads, converted to float32 the same way, nothing computed on it."""
    torch.set_num_threads(1)
    order = [(weights.info(name), *block) for name in weights.names if weights.info(name).dtype in TORCH_DTYPES
             for block in row_spans(weights.info(name), CHUNK_ELEMENTS)]
    reader = BlockReads(weights, order)
    try:
        for block in order:
            reader.read(*block)
    finally:
        reader.close()


def best_of(fn, repeat: int) -> float:
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.model_dir is None:
        from tests import assets
        args.model_dir = assets.smollm2_dir()
    weights = Weights.open(args.model_dir)
    nbytes = sum(math.prod(weights.info(n).shape) * 4 for n in weights.names)
    threads = torch.get_num_threads()
    scan_weights(weights)  # warm the page cache
    scan = best_of(lambda: scan_weights(weights), args.repeat)
    read = best_of(lambda: read_only(weights), args.repeat)
    torch.set_num_threads(threads)
    print(f"model: {args.model_dir} ({nbytes / 2**20:.0f} MiB as float32)")
    print(f"read blocks only: {read:.3f} s  ({nbytes / read / 2**30:.2f} GiB/s)")
    print(f"full scan:        {scan:.3f} s  ({nbytes / scan / 2**30:.2f} GiB/s)")
    print(f"scan / read: {scan / read:.2f}x  (best of {args.repeat})")


if __name__ == "__main__":
    main()
