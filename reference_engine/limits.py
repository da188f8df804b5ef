"""Sane bounds on every size a model directory declares, checked before anything is sized from it.

A config.json, a tokenizer.json or a file header is input like any other: `"num_hidden_layers": 1000000000`
must become a one-line ModelDirError, not a table of a billion layers built until the kernel kills the
process. Two rules:

- a declared size is an integer inside [minimum, LIMIT] (`check_size`); the limits sit far above every public
  checkpoint (the comment on each says how far), so a real model never meets them;
- a declared size is believed only as far as the files back it: a config claiming more decoder layers than
  the weights hold tensors for is reported from the layer indices *present* (`present_layers`,
  `check_layers_present`), never by enumerating the claim; an allocation sized from a declared number
  (the RoPE table, a cache) is compared with the memory actually available first (`check_allocation`).

Reused by the config parser, the engine, the tokenizer, the GGUF reader and the checks; imports nothing of
the engine's stages.
"""
from __future__ import annotations

import ctypes
import os
import re
import resource
from pathlib import Path
from typing import Any, Iterable

from reference_engine.errors import ModelDirError

# ---- declared model geometry (config.json, GGUF metadata) -------------------------------------------------
MAX_LAYERS = 1 << 10             # 1024; the deepest public decoders have ~126 (Llama 3.1 405B)
MAX_HIDDEN = 1 << 17             # 131072; the widest public hidden size is ~25600
MAX_HEADS = 1 << 12              # 4096 attention (or key/value) heads; public models have <= 128
MAX_HEAD_DIM = 1 << 13           # 8192; public models use 64..512
MAX_INTERMEDIATE = 1 << 20       # MLP width; public models stay below ~60000
MAX_EXPERTS = 1 << 10            # 1024 experts per MoE layer; public models have <= 512
MAX_VOCAB = 1 << 24              # 16.7M rows / token ids; the largest public vocabularies are ~262k
MAX_POSITIONS = 1 << 27          # 134M positions; the longest public context is 10M (Llama 4 Scout)
# ---- files ------------------------------------------------------------------------------------------------
MAX_SHARDS = 1 << 14             # weight shards of one checkpoint; the largest public ones have ~200
MAX_TENSORS = 1 << 21            # tensors in one checkpoint; a 1T-parameter MoE has ~100k
MAX_EXPECTED_TENSORS = 1 << 20   # entries of the expected tensor table built from a config (~150 MB)
# ---- tokenizer --------------------------------------------------------------------------------------------
MAX_TOKENIZER_VOCAB = MAX_VOCAB  # entries of tokenizer.json model.vocab / added_tokens, and any token id
MAX_MERGES = 1 << 24             # BPE merge rules; public tokenizers have <= ~500k

# config field -> (limit, minimum): the fields ModelConfig holds. A minimum of None leaves values below the
# limit to the CFG checks (a non-positive max_position_embeddings is CFG005's finding, not a parse error).
CONFIG_SIZES: dict[str, tuple[int, int | None]] = {
    "num_hidden_layers": (MAX_LAYERS, 1),
    "hidden_size": (MAX_HIDDEN, 1),
    "intermediate_size": (MAX_INTERMEDIATE, 1),
    "num_attention_heads": (MAX_HEADS, 1),
    "num_key_value_heads": (MAX_HEADS, None),   # 0 / null mean "same as num_attention_heads"
    "head_dim": (MAX_HEAD_DIM, None),           # odd / zero head_dim is CFG002's finding
    "vocab_size": (MAX_VOCAB, 1),
    "max_position_embeddings": (MAX_POSITIONS, None),
}
NUMBERS = ("rms_norm_eps",)      # read with float(): anything but a number is a parse error, not a crash
# fields parse_config type-checks itself (reference_engine/config.py _require_int): only the bound is added here
PARSER_TYPED = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "vocab_size")
NULLABLE = ("num_key_value_heads", "head_dim")   # null means "derive it"
# optional fields some families read (MoE, sliding window, RoPE): bounded when they are integers; a value of
# another type is the reading family's error to report
OPTIONAL_SIZES: dict[str, int] = {
    "num_experts": MAX_EXPERTS, "num_local_experts": MAX_EXPERTS, "n_routed_experts": MAX_EXPERTS,
    "n_shared_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS,
    "moe_intermediate_size": MAX_INTERMEDIATE, "shared_expert_intermediate_size": MAX_INTERMEDIATE,
    "decoder_sparse_step": MAX_LAYERS, "max_window_layers": MAX_POSITIONS, "first_k_dense_replace": MAX_LAYERS,
    "sliding_window": MAX_POSITIONS, "sliding_window_pattern": MAX_LAYERS,
    "original_max_position_embeddings": MAX_POSITIONS,
}
# "model.layers.12.mlp..." (Hugging Face) and "blk.12.ffn_up..." (GGUF); at most 9 digits, so a hostile
# "layers.99999...9" name is simply not a layer index rather than a giant int
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|blk)\.(\d{1,9})\.")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_size(name: str, value: Any, limit: int, path: str | Path, minimum: int | None = 1) -> int:
    """`value` when it is an integer in [minimum, limit]; else ModelDirError(path, one line naming `name`).
    minimum=None checks only the type and the upper limit."""
    if not is_int(value):
        shown = repr(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
        raise ModelDirError(path, f"'{name}' must be an integer, found {shown[:60]}")
    if minimum is not None and value < minimum:
        raise ModelDirError(path, f"'{name}' must be >= {minimum}, found {value}")
    if value > limit:
        raise ModelDirError(path, f"'{name}' is {value}, above the sane limit of {limit} "
                                  f"(reference_engine/limits.py); the file is corrupt or hostile")
    return value


def check_config_sizes(raw: dict, path: str | Path) -> None:
    """Bound every size field of a config.json dict (after alias resolution), before any is used."""
    for name, (limit, minimum) in CONFIG_SIZES.items():
        value = raw.get(name)
        if name not in raw or (value is None and name in NULLABLE) or (name in PARSER_TYPED and not is_int(value)):
            continue                            # absent, or a type the parser reports in its own words
        check_size(name, value, limit, path, minimum)
    for name in NUMBERS:
        value = raw.get(name)
        if name in raw and (isinstance(value, bool) or not isinstance(value, (int, float))):
            shown = repr(value) if isinstance(value, (str, type(None))) else type(value).__name__
            raise ModelDirError(path, f"'{name}' must be a number, found {shown[:60]}")
    for name, limit in OPTIONAL_SIZES.items():
        if is_int(raw.get(name)):
            check_size(name, raw[name], limit, path, minimum=None)
    for key in ("rope_scaling", "rope_parameters"):
        block = raw.get(key)
        if isinstance(block, dict) and is_int(block.get("original_max_position_embeddings")):
            check_size(f"{key}.original_max_position_embeddings", block["original_max_position_embeddings"],
                       MAX_POSITIONS, path, minimum=None)


def present_layers(names: Iterable[str], declared: int | None = None) -> list[int]:
    """Sorted distinct decoder-layer indices that tensor names carry (below `declared` when given)."""
    found = {int(m.group(1)) for m in map(LAYER_INDEX.search, names) if m}
    return sorted(i for i in found if declared is None or i < declared)


def layers_backed(declared: int, names: Iterable[str]) -> int:
    """1 + the last layer index below `declared` that a tensor name carries (0: none). Enumerating
    range(layers_backed(...)) is bounded by the tensors present, whatever the config claims."""
    present = present_layers(names, declared)
    return present[-1] + 1 if present else 0


def check_layers_present(declared: int, names: Iterable[str], path: str | Path) -> None:
    """ModelDirError when the config declares decoder layers past the last one the weights hold tensors for
    (a hole before it is left to the caller's missing-tensor report)."""
    backed = layers_backed(declared, names)
    if backed < declared:
        held = f"only for layers 0..{backed - 1}" if backed else "for no decoder layer at all"
        raise ModelDirError(path, f"config declares num_hidden_layers = {declared} but the weights hold tensors "
                                  f"{held}")


# ---- memory -----------------------------------------------------------------------------------------------
def memory_left() -> tuple[int | None, str]:
    """Memory this process can still take, and what bounds it: the least of MemAvailable ("available memory"),
    the address-space limit (RLIMIT_AS, `ulimit -v`) minus what is mapped, and the cgroup limit minus what it
    holds that cannot be reclaimed. (None, "unknown") when nothing can be read. The one place that answers
    "how much is left": the planner's default budget and the engine's allocation guard both ask here."""
    candidates = [(meminfo_available(), "available memory"),
                  (_address_space_left(), "address-space limit (ulimit -v)"),
                  (cgroup_left(), "cgroup memory limit")]
    known = [(left, source) for left, source in candidates if left is not None]
    if not known:
        return None, "unknown"
    left, source = min(known, key=lambda c: c[0])
    return max(left, 0), source


def available_bytes() -> int | None:
    """memory_left() without the reason."""
    return memory_left()[0]


def meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        mapped = 0
    return soft - mapped


def cgroup_left() -> int | None:
    """The cgroup limit minus what it holds that cannot be reclaimed (v2, then v1); None when unlimited."""
    for limit_file, usage_file, stat_file, v2 in cgroup_memory_files():
        left = _limit_minus_usage(limit_file, usage_file, stat_file, v2)
        if left is not None:
            return left
    return None


def cgroup_memory_files() -> list[tuple[Path, Path, Path, bool]]:
    """(limit, usage, stat, is_v2) files of this process's memory cgroup."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        hier, controllers, rel = (line.split(":", 2) + ["", ""])[:3]
        if hier == "0" and controllers == "":         # cgroup v2
            base = Path("/sys/fs/cgroup") / rel.lstrip("/")
            out.append((base / "memory.max", base / "memory.current", base / "memory.stat", True))
        elif "memory" in controllers.split(","):      # cgroup v1
            base = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            out.append((base / "memory.limit_in_bytes", base / "memory.usage_in_bytes", base / "memory.stat", False))
    return out


def _limit_minus_usage(limit_file: Path, usage_file: Path, stat_file: Path | None = None,
                       v2: bool = True) -> int | None:
    """limit - usage, where clean page cache (weights read through a memory map or with plain reads) does not
    count as used: the kernel drops it before it would kill anything, so it is room, not load."""
    try:
        limit = limit_file.read_text().strip()
        if limit == "max" or int(limit) >= 1 << 60:
            return None
        usage = int(usage_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return int(limit) - max(usage - reclaimable_cache(stat_file, v2), 0)


def reclaimable_cache(stat_file: Path | None, v2: bool) -> int:
    """Clean page cache charged to the cgroup (file pages minus dirty and under writeback); 0 if unreadable."""
    keys = ("file", "file_dirty", "file_writeback") if v2 else ("total_cache", "total_dirty", "total_writeback")
    try:
        stat = dict(line.split()[:2] for line in stat_file.read_text().splitlines() if line.strip())
        cache, dirty, writeback = (int(stat.get(k, 0)) for k in keys)
    except (OSError, ValueError, AttributeError):
        return 0
    return max(cache - dirty - writeback, 0)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def check_allocation(what: str, nbytes: int, path: str | Path, why: str = "") -> None:
    """ModelDirError (one line) when allocating `nbytes` for `what` cannot fit the memory available."""
    free = available_bytes()
    if free is not None and nbytes > free:
        because = f" ({why})" if why else ""
        raise ModelDirError(path, f"{what} would need {human_bytes(nbytes)}{because}, more than the "
                                  f"{human_bytes(free)} of memory available")


def rope_table_bytes(max_positions: int, head_dim: int) -> int:
    """Peak bytes while the RoPE table is built (core/rope.py: float32 positions, frequencies, the doubled
    angles, cos and sin and their scaled copies): about six float32 [positions, head_dim] tensors."""
    return 6 * 4 * max(max_positions, 0) * max(head_dim, 0)


def check_rope_table(max_positions: int, head_dim: int, path: str | Path) -> None:
    """Refuse, before allocating, a RoPE table that cannot exist or cannot fit."""
    if max_positions < 1:
        raise ModelDirError(path, f"max_position_embeddings is {max_positions}: the RoPE table would hold no "
                                  f"positions")
    check_allocation("the RoPE table", rope_table_bytes(max_positions, head_dim), path,
                     f"max_position_embeddings {max_positions} x head_dim {head_dim}")


def check_token_ids(tables: Iterable[Iterable[int]], path: str | Path, what: str = "token id") -> None:
    """Every id of the tokenizer's tables (id -> token maps, added-token ids) is in [0, MAX_TOKENIZER_VOCAB)
    and no table is longer than that: a hostile `"x": 1000000000000` in tokenizer.json would otherwise size
    every table indexed by id (embedding checks, decode-every-id loops)."""
    for table in tables:
        ids = list(table)
        if len(ids) > MAX_TOKENIZER_VOCAB:
            raise ModelDirError(path, f"{len(ids)} vocabulary entries, above the sane limit of "
                                      f"{MAX_TOKENIZER_VOCAB} (reference_engine/limits.py)")
        if ids:
            check_size(f"largest {what}", max(ids), MAX_TOKENIZER_VOCAB - 1, path, minimum=None)
            check_size(f"smallest {what}", min(ids), MAX_TOKENIZER_VOCAB - 1, path, minimum=0)


M_MMAP_THRESHOLD = -3      # glibc mallopt parameter


def return_freed_memory_to_os(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold at `threshold` so every freed block at least that large goes back to the OS.

    glibc raises its threshold (up to 32 MiB) each time a mapped block is freed, after which a layer's
    weights and a step's activations of that size come from the heap and stay there when freed: a streaming
    run's size then creeps up pass after pass although it holds one layer. Called when a run streams, where
    the memory budget matters more than the page faults of fresh mappings. False where libc is not glibc."""
    try:
        return ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, int(threshold)) == 1
    except (OSError, AttributeError):
        return False


MADV_DONTNEED = 4          # Linux madvise advice


def release_pages(tensor) -> bool:
    """Give the whole memory pages inside a CPU tensor's buffer back to the OS (madvise DONTNEED): they read
    as zeros afterwards and cost nothing until written again. For buffers whose content is dead (a KV pool
    with no sequence in it); False where it cannot be done (not Linux/glibc, no whole page inside)."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    first, last = -(-start // page) * page, end // page * page
    if last <= first:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED) == 0
    except (OSError, AttributeError):
        return False
