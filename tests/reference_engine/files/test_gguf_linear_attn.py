"""architectures/hybrid/qwen3_next.py without the converter: Qwen3-Next's in_proj_qkvz joined per key head from the flat
attn_qkv + attn_gate rows (rows labelled by what they are), and parts that disagree with the metadata refused
with a ValueError (GGUFWeights turns it into a one-line ModelDirError). The converter's own files:
tests/reference_engine/core/hybrid/test_gguf_qwen3_next.py."""
from __future__ import annotations

import pytest
import torch

from reference_engine.architectures.hybrid.qwen3_next import QKVZ, join_qkvz, join_qkvz_shape

K, DK, R, DV, HIDDEN = 2, 3, 2, 4, 5            # key heads, key head size, value heads per key head, value size


def meta(values: dict):
    return values.get


def labelled(kind: str, head: int, rows: int) -> torch.Tensor:
    """rows whose every value names (kind, key head, row): 100 * kind + 10 * head + row."""
    code = "qkvz".index(kind)
    return (100 * code + 10 * head + torch.arange(rows, dtype=torch.float32))[:, None].expand(rows, HIDDEN)


def test_join_puts_each_key_heads_rows_together():
    flat = {kind: torch.cat([labelled(kind, h, size) for h in range(K)])
            for kind, size in (("q", DK), ("k", DK), ("v", R * DV), ("z", R * DV))}
    qkv, z = torch.cat([flat["q"], flat["k"], flat["v"]]), flat["z"]
    assert join_qkvz_shape(QKVZ, [tuple(qkv.shape), tuple(z.shape)]) == (2 * K * DK + 2 * K * R * DV, HIDDEN)
    out = join_qkvz(QKVZ, [qkv, z], meta({"ssm.group_count": K, "ssm.state_size": DK}))
    want = torch.cat([labelled(kind, h, size) for h in range(K)
                      for kind, size in (("q", DK), ("k", DK), ("v", R * DV), ("z", R * DV))])
    assert torch.equal(out, want)


def test_parts_that_disagree_with_the_metadata_are_refused():
    qkv, z = torch.zeros(2 * K * DK + K * R * DV, HIDDEN), torch.zeros(K * R * DV, HIDDEN)
    for bad in ({"ssm.group_count": K, "ssm.state_size": DK + 1}, {"ssm.group_count": None, "ssm.state_size": DK},
                {"ssm.group_count": 0, "ssm.state_size": DK}):
        with pytest.raises(ValueError, match="do not split"):
            join_qkvz(QKVZ, [qkv, z], meta(bad))
    assert join_qkvz_shape(QKVZ, [(10, HIDDEN), (4, HIDDEN + 1)]) is None
