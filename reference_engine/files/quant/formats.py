"""What the format modules share: the tensor checks that make bad input one line (a part present with its
dtype and rank, a g_idx within its groups) and the measured dequantization scratch. QuantModule is module.py's."""
from __future__ import annotations

from pathlib import Path

from reference_engine.errors import ModelDirError
from reference_engine.files.weights import Weights

FLOATS = ("F32", "F16", "BF16")


# Peak bytes per element while one weight is dequantized (its float32 result included), measured with
# ru_maxrss on a [1024, 4096] weight: 4/8-bit integer formats 9.5-14, NVFP4 18.5, bitsandbytes 17.6, block
# FP8 13; widths that do not divide 32 (3 bits) go through the bit stream: 30.
SCRATCH_BYTES_PER_ELEM = 20
SCRATCH_BYTES_PER_ELEM_ODD_BITS = 32


def scratch_bytes_per_elem(table) -> int:
    odd = any(m.extra.get("bits", 4) not in (1, 2, 4, 8) for m in table.modules.values())
    return SCRATCH_BYTES_PER_ELEM_ODD_BITS if odd else SCRATCH_BYTES_PER_ELEM


def stored_prefixes(raw: Weights, suffix: str) -> list[str]:
    """Module prefixes that store `prefix + suffix` (".qweight" -> "model.layers.0.self_attn.q_proj")."""
    return [n[: -len(suffix)] for n in raw.names if n.endswith(suffix)]


def part(raw: Weights, prefix: str, role: str, dtypes: tuple[str, ...], ndim: int | tuple[int, ...], scheme: str):
    """The stored tensor prefix.role, checked present with one of `dtypes` and `ndim` dimensions."""
    name = f"{prefix}.{role}"
    if name not in raw:
        where = raw.files[0] if raw.files else Path(prefix)
        raise ModelDirError(where, f"{prefix} ({scheme}) is missing its {role} tensor")
    info = raw.info(name)
    if info.dtype not in dtypes:
        raise ModelDirError(info.file, f"{name} ({scheme}) has dtype {info.dtype}, expected {'/'.join(dtypes)}")
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if len(info.shape) not in ndims:
        raise ModelDirError(info.file, f"{name} ({scheme}) has shape {list(info.shape)}, expected "
                                       f"{' or '.join(map(str, ndims))} dimensions")
    return info


def disagree(info, scheme: str, problem: str) -> ModelDirError:
    return ModelDirError(info.file, f"{info.name} ({scheme}): {problem}")


def check_groups(raw: Weights, g_idx, groups: int, scheme: str) -> None:
    """A g_idx ([in], the group of each input column) names only groups 0..groups-1: read when the table
    opens (4 bytes a column), so an index past the last group is one line before any pass, not a failure
    inside the first layer's dequantization."""
    g = raw.get(g_idx.name).long()
    bad = (g < 0) | (g >= groups)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise disagree(g_idx, scheme, f"{int(bad.sum())} entries outside 0..{groups - 1} (column {first} is in "
                                      f"group {int(g[first])}): they would read scales that do not exist")
