"""The memory model: resident or streaming, and what a run will cost, decided before any weight is loaded.

    plan = make_plan(model_dir, budget=parse_size("4GiB"), dtype=torch.float32, workload=workload)
    plan.mode        # "resident" | "streaming"; PlanError when even streaming does not fit

Resident peak  = base + all weights in the compute dtype (+ oneDNN's packed decode copy where decode packs)
                 + KV cache in use + activations of the longest step.
Streaming peak = base + one layer (its file bytes, its compute copy, the fused Q/K/V and gate/up copies, and
                 the low-precision shadows the numerics checks run beside it) + one LM-head block (read and
                 cast) + the final norm + KV cache in use + activations.
A pass reads every layer and the head once (resident: nothing after loading). docs/memory.md explains it.
The model's sizes come from the tensor headers of a safetensors directory or a GGUF file (model_sizes.py):
a GGUF layer costs its quantized bytes to read and its element count in the compute dtype to hold.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field

import torch

from reference_engine.config import ModelConfig
from reference_engine.core import families
from reference_engine.core.linear import PACKABLE
from reference_engine.budget.model_sizes import ModelSizes, model_sizes
from reference_engine.streaming.sweep import HEAD_BLOCK_BYTES
from reference_engine.limits import memory_left

GiB, MiB = 1 << 30, 1 << 20
# python + torch + the checks' own state (VmHWM 246 MiB after the CLI's imports with torch 2.x, which alone
# is 237 MiB), and the tokenizer (SmolLM2's 49152 ids: +50 MB, so ~1 KiB per id with its merges and caches)
BASE_BYTES, TOKENIZER_BYTES_PER_ID = 240 * MiB, 1 << 10
HEADROOM_FRACTION, HEADROOM_MIN = 0.10, 512 * MiB
DISK_BYTES_PER_S = 0.7e9         # cold sequential reads on the reference machine (dd iflag=direct: 0.70-0.74 GB/s)
CPU_FLOPS = 20e9                 # float32 matmul throughput of a small CPU box, for the rough time only
DEQUANT_ELEMS_PER_S = 60e6       # gguf's numpy kernels (Q4_1, one core), measured on SmolLM2 Q4_1
PACK_LIMIT_BYTES = 1 << 30       # linear.PACK_LIMIT_BYTES: decode keeps a packed copy below this


class PlanError(ValueError):
    """Even streaming one layer at a time does not fit the memory budget (one line, exit 2)."""


@dataclass(frozen=True)
class Workload:
    """What the run will do to the model: passes over the weights, tokens per pass, KV and shadows. Each caller
    brings its own (the engine knows no command); the plan only prices it."""
    name: str
    passes: int                  # estimated passes (steps) over the weights
    tokens_per_pass: int         # typical new tokens per pass (for the time estimate)
    max_step_tokens: int         # longest single step (activation memory)
    kv_tokens: int               # KV-cache tokens held at once
    shadows: tuple = ()          # dtypes computed beside the compute dtype in the same pass (numerics)
    pack_decode: bool = False    # worth decode's packed copy of the projections (long decodes: generate)
    logit_rows: int = 0          # float32 logits rows one pass returns at once (0: the longest step's, <= 128)
    sequences: int = 1           # sequences held at once (a hybrid's recurrent state is per sequence)


@dataclass
class Plan:
    mode: str                    # "resident" | "streaming"
    budget_bytes: int
    budget_source: str           # "--memory-budget", "available memory", ...
    device: str
    dtype: str
    workload: str
    weight_file_bytes: int
    resident_peak_bytes: int
    streaming_peak_bytes: int
    predicted_peak_bytes: int
    largest_layer_bytes: int     # one layer in the compute dtype
    bytes_per_pass: int          # read from disk per pass (0 when resident)
    passes: int                  # estimated
    predicted_seconds: float
    ranks: int = 1
    layers: list = field(default_factory=list)    # [first, end) of this rank's layers
    pack_decode: bool = False    # resident with room for decode's packed copy (core/linear.py)
    kv_tokens: int = 0           # KV-cache tokens the plan counted (the engine's cache is sized to them on a CPU)
    actual: dict = field(default_factory=dict)     # after the run: passes, bytes_read, seconds, peak_bytes

    @property
    def streaming(self) -> bool:
        return self.mode == "streaming"

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        read = (f"{gb(self.bytes_per_pass)} read per pass x ~{self.passes} passes" if self.streaming
                else f"{gb(self.weight_file_bytes)} read once")
        ranks = f", rank layers {self.layers[0]}..{self.layers[1] - 1} of {self.ranks} ranks" if self.ranks > 1 else ""
        return (f"plan: {self.mode} ({self.dtype} on {self.device}{ranks}): predicted peak "
                f"{gb(self.predicted_peak_bytes)} of a {gb(self.budget_bytes)} budget ({self.budget_source}); "
                f"{read}; KV cache {self.kv_tokens} tokens; ~{fmt_seconds(self.predicted_seconds)} for "
                f"{self.workload}")


# ---- sizes ----------------------------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10 ** 3, "m": MiB, "mib": MiB, "mb": 10 ** 6,
          "g": GiB, "gib": GiB, "gb": 10 ** 9, "t": 1 << 40, "tib": 1 << 40, "tb": 10 ** 12}


def parse_size(text) -> int:
    """'512MiB', '4GiB', '4G' (binary), '4GB' (decimal), '1.5g', 123456 -> bytes; ValueError otherwise.
    The one reader of a memory size on the command line and in the config file: `4G` is 4 GiB wherever it is
    typed (check, diff, generate, baseline, probe kv, probe bandwidth), as in `free -g` and ulimit."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"invalid memory size {text!r} (examples: 512MiB, 4GiB, 4G, 8GB)")
        value, unit = float(m.group(1)), m.group(2).lower()
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"memory size must be positive, found {text!r}")
    return size


def gb(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def default_budget(device: str = "cpu") -> tuple[int, str]:
    """What this process may use in all, minus headroom. On a CPU: the memory still left (MemAvailable, ulimit -v,
    the cgroup limit) plus the part of what the process already holds that the plan counts in its base term
    (the interpreter and torch: without it they would be counted twice, once as used and once as base). The
    headroom is 10%, and at least 512 MiB when the bound is the machine's available memory (the OS and other
    processes share it); a cgroup or ulimit bounds this process alone, so 64 MiB is enough there. On CUDA the
    free GPU memory minus 10% (at least 512 MiB)."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return max(free - max(int(free * HEADROOM_FRACTION), HEADROOM_MIN), 0), "free GPU memory minus headroom"
    avail, source = memory_left()      # MemAvailable, ulimit -v and the cgroup limit, the least of them
    if avail is None:
        avail, source = 8 * GiB, "assumed 8 GiB (memory left unknown)"
    total = avail + min(current_rss(), BASE_BYTES)
    floor = HEADROOM_MIN if source == "available memory" else 64 * MiB
    return max(total - max(int(total * HEADROOM_FRACTION), floor), 0), source + " minus headroom"


def current_rss() -> int:
    """This process's resident set now (VmRSS), 0 when it cannot be read."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def local_ranks() -> int:
    """Processes of this run on this host (torchrun's LOCAL_WORLD_SIZE; 1 outside torchrun)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    except ValueError:
        return 1


def host_share(budget: int | None, device, ranks: int, budget_source: str | None) -> tuple[int, str]:
    """This process's part of the budget. --memory-budget is the host's: the local ranks of a torchrun split it,
    and their default too (each its share of the machine's available memory, not all of it); on CUDA each
    local rank has a GPU of its own, so a default GPU budget is not split."""
    explicit = budget is not None
    if not explicit:
        budget, budget_source = default_budget(device)
    sharers = local_ranks() if ranks > 1 else 1
    if sharers > 1 and (explicit or not str(device).startswith("cuda")):
        return budget // sharers, f"{budget_source or '--memory-budget'} / {sharers} local ranks"
    return budget, budget_source or "--memory-budget"


CLEAR_REFS, RESET_HWM = "/proc/self/clear_refs", "5"    # Linux: writing "5" resets VmHWM to the current RSS


@dataclass(frozen=True)
class PeakStart:
    """Where one run's peak measurement began: whether each high-water mark was reset at its start (a mark
    that was not is the process's maximum so far, and measured_peak says so)."""
    cpu: bool
    cuda: bool


def start_peak() -> PeakStart:
    """Begin one run's peak: collect what an earlier run left in reference cycles, then reset the high-water
    marks (CPU: VmHWM through /proc/self/clear_refs; CUDA: torch's peak statistics), so that measured_peak
    reports this run's peak, not the largest earlier run's of a long-lived process (a notebook, a test
    session, a service calling llmdoctor.check)."""
    import ctypes
    import gc
    gc.collect()
    try:                     # glibc keeps freed heap pages resident: hand them back, the mark starts at what is used
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    cuda = torch.cuda.is_available()
    for index in range(torch.cuda.device_count() if cuda else 0):
        torch.cuda.reset_peak_memory_stats(index)
    try:
        with open(CLEAR_REFS, "w", encoding="ascii") as f:
            f.write(RESET_HWM)
        return PeakStart(cpu=True, cuda=cuda)
    except OSError:          # not Linux, or /proc read-only: the process's high-water mark, named as such
        return PeakStart(cpu=False, cuda=cuda)


def measured_peak(device="cpu", since: PeakStart | None = None) -> tuple[int | None, str]:
    """(peak bytes, what was measured), to hold against the plan's prediction: on CUDA torch's
    max_memory_allocated on the device; on a CPU the resident-set high-water mark (VmHWM, else ru_maxrss),
    which counts the interpreter and torch as the plan's base does. since: the run's start_peak; a mark it
    did not reset is named as the process's maximum so far."""
    whole = " (the process's maximum so far)"
    if str(device).startswith("cuda") and torch.cuda.is_available():
        scope = "" if since is not None and since.cuda else whole
        return int(torch.cuda.max_memory_allocated(torch.device(device))), "torch.cuda.max_memory_allocated" + scope
    scope = "" if since is not None and since.cpu else whole
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM" + scope
    except OSError:
        pass
    try:
        import resource
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "ru_maxrss" + whole
    except (ImportError, OSError):
        return None, "unmeasured"


# ---- the plan --------------------------------------------------------------------------------------

def make_plan(model_dir, budget: int | None = None, *, dtype=torch.float32, device="cpu",
              workload: Workload, budget_source: str | None = None, ranks: int = 1,
              rank: int = 0, force: str | None = None, adapter=None) -> Plan:
    """Decide resident or streaming for this model (with a LoRA adapter merged: adapter), budget and workload;
    PlanError when nothing fits (a forced mode too: LLMDOCTOR_STREAMING=1 or a torchrun pipeline refuses what
    does not fit, it never runs over)."""
    sizes = model_sizes(model_dir, adapter)   # a safetensors directory or a GGUF file (model_sizes.py)
    root, config = sizes.root, sizes.config
    budget, budget_source = host_share(budget, device, ranks, budget_source)
    elem = torch.finfo(dtype).bits // 8
    layer_elems, layer_files = sizes.layer_elems, sizes.layer_files
    first, end = split_layers(config.num_hidden_layers, ranks)[rank]
    mine = range(first, end)
    vocab_rows = config.vocab_size * config.hidden_size
    head_copies = 1 if config.tie_word_embeddings else 2
    file_bytes = sizes.file_bytes
    kv = workload.kv_tokens * families.kv_bytes_per_token(config, dtype, mine)   # the family's layout, my layers
    kv += workload.sequences * families.state_bytes(config, mine)        # hybrids: constant per sequence
    act = activation_bytes(config, workload.max_step_tokens, elem, workload.logit_rows)
    resident_weights = (sum(layer_elems[i] for i in mine) + vocab_rows * head_copies + config.hidden_size) * elem
    projections = sum(layer_elems[i] for i in mine) * elem + vocab_rows * elem
    # decode's packed copy (linear.py) doubles the projections: only for long decodes, only where it fits
    packs = workload.pack_decode and str(device) == "cpu" and dtype in PACKABLE and projections <= PACK_LIMIT_BYTES
    packed = projections if packs else 0
    # a GGUF is dequantized tensor by tensor while loading (gguf_reader.py, as when streaming): the largest
    # one's float32 copy and the kernel scratch
    dequant = sizes.dequant_bytes(sizes.largest_elems, elem)
    base = BASE_BYTES + config.vocab_size * TOKENIZER_BYTES_PER_ID
    big = max((layer_elems[i] for i in mine), default=0)
    big_file = max((layer_files[i] for i in mine), default=0)
    shadow = sum(big * (torch.finfo(d).bits // 8) for d in workload.shadows)    # one layer cast, both paths
    # loading holds one tensor as read beside its cast copy (the embedding's file bytes: 0.5 GB for Llama-3 1B
    # in bfloat16); the shadows come later, when the loaded tensors are all there is
    file_width = sizes.head_bytes_per_elem()
    load = int(sizes.largest_elems * file_width) if not sizes.gguf and file_width != elem else 0
    resident = base + resident_weights + packed + kv + act + max(dequant + load, shadow)
    largest = max((sizes.layer_largest[i] for i in mine), default=0)
    # the streaming core keeps one layer's buffers and overwrites them layer after layer: the file bytes (the
    # read-ahead thread reads the next layer into them while this one computes) and the compute copy, fused in
    # place (no cat); the shadows are cast beside it
    layer_peak = big_file + big * elem + shadow + sizes.dequant_bytes(largest, elem)
    head_block = head_block_bytes(sizes, elem, workload.shadows)
    # lanes of a pass (probes, shadows) go through a layer one after another: one step's activations at a time
    streaming = base + layer_peak + head_block + kv + act
    per_pass = sum(layer_files[i] for i in mine) + sizes.head_file_bytes    # every layer, the whole head
    if packed and resident > budget and resident - packed <= budget:
        resident, packed = resident - packed, 0           # resident without the packed copy still fits
    mode = force or ("resident" if resident <= budget else "streaming")
    need = streaming if mode == "streaming" else resident
    if need > budget:
        what = "to stream one layer at a time" if mode == "streaming" else "to hold the model resident"
        forced = f" ({mode} forced)" if force else ""
        raise PlanError(f"{root}: needs at least {gb(need)} {what}{forced} (largest layer {gb(big * elem)} in "
                        f"{dtype_name(dtype)}, plus {gb(kv + act)} of KV cache and activations: "
                        f"{workload.kv_tokens} KV tokens for {workload.name}); the memory budget is {gb(budget)} "
                        f"({budget_source})")
    compute = 2 * sum(layer_elems[i] for i in mine) * workload.tokens_per_pass / CPU_FLOPS     # per pass
    if mode == "streaming":            # the read-ahead thread reads while the lanes compute: the slower one sets
        read = per_pass / DISK_BYTES_PER_S                                                 # the pace
        seconds = workload.passes * (max(read, compute) if sizes.reads_ahead else read + compute)
    else:
        seconds = workload.passes * compute + file_bytes / DISK_BYTES_PER_S
    if sizes.gguf:                     # dequantized as read: every pass when streaming, once when resident
        dequantized = sum(layer_elems[i] for i in mine) + vocab_rows
        seconds += dequantized * (workload.passes if mode == "streaming" else 1) / DEQUANT_ELEMS_PER_S
    return Plan(mode, budget, budget_source or "--memory-budget", str(device), dtype_name(dtype), workload.name,
                file_bytes, resident, streaming, resident if mode == "resident" else streaming, big * elem,
                per_pass if mode == "streaming" else 0, workload.passes, seconds, ranks, [first, end],
                pack_decode=mode == "resident" and packed > 0, kv_tokens=workload.kv_tokens)


def head_block_bytes(sizes: ModelSizes, elem: int, shadows: tuple = ()) -> int:
    """One LM-head block, read once per pass for every lane (sweep.blocked_heads): HEAD_BLOCK_BYTES in the
    widest dtype of the pass; its file bytes (a GGUF's quantized bytes, dequantized to float32 first), its
    copy in the compute dtype, and one cast per shadow dtype."""
    config = sizes.config
    widths = [elem] + [torch.finfo(d).bits // 8 for d in shadows]
    elems = min(config.vocab_size * config.hidden_size, HEAD_BLOCK_BYTES // max(widths))
    read = sizes.head_bytes_per_elem()
    dequant = 4 if sizes.gguf else 0
    as_read = 4 if sizes.gguf else read               # what the bytes become before the cast
    compute_copy = 0 if as_read == elem else elem      # float32 file (or dequantized GGUF) in float32: no copy
    casts = compute_copy + sum(w for w in widths[1:] if w != elem)
    return int(elems * (read + dequant + casts))


def activation_bytes(config: ModelConfig, tokens: int, elem: int, logit_rows: int = 0) -> int:
    """The longest step's transient tensors: residual, norms, Q/K/V, MLP intermediate, and the float32 logits
    rows a pass returns at once (logit_rows; default: the step's, at most 128)."""
    qkv = (config.num_attention_heads + 2 * config.num_key_value_heads) * config.head_dim
    per_token = (6 * config.hidden_size + qkv + 3 * config.intermediate_size) * elem
    return tokens * per_token + (logit_rows or min(tokens, 128)) * config.vocab_size * 4


def split_layers(num_layers: int, ranks: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges, the first ranks one layer longer when it does not divide."""
    base, extra = divmod(num_layers, ranks)
    out, start = [], 0
    for r in range(ranks):
        end = start + base + (1 if r < extra else 0)
        out.append((start, end))
        start = end
    return out


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")
