"""What config.json's `quantization_config` declares, read once into a QuantScheme the QNT checks compare the
stored tensors against: the format, bits, group size, symmetry, act-order, which modules are left in float and
whether the KV cache is quantized. Key names follow each producer (AutoGPTQ/gptqmodel, AutoAWQ,
compressed-tensors, DeepSeek-style fp8, transformers' bitsandbytes); a value that cannot be right is a
ConfigProblem naming its key, never an exception.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

METHODS = ("gptq", "awq", "compressed-tensors", "fp8", "bitsandbytes")
BITS = {"gptq": (2, 3, 4, 8), "awq": (4,), "compressed-tensors": (4, 8)}
GPTQ_FORMATS = ("gptq", "gptq_v2")
AWQ_VERSIONS = ("gemm", "gemv")
CT_FORMATS = ("pack-quantized", "float-quantized", "nvfp4-pack-quantized", "int-quantized", "naive-quantized")
BNB_TYPES = ("nf4", "fp4")
MAX_GROUP = 1 << 16            # no producer groups more than this many input channels


@dataclass(frozen=True)
class ConfigProblem:
    key: str                   # "bits" -> location quantization_config.bits
    message: str


@dataclass
class QuantScheme:
    method: str
    fmt: str                   # gptq/gptq_v2, gemm/gemv, a compressed-tensors format, fp8, nf4/fp4/int8
    bits: int | None = None
    group_size: int | None = None    # -1: one group per output channel (whole input)
    sym: bool = True
    desc_act: bool = False
    lm_head: bool = False            # GPTQ: lm_head quantized too
    skip: list[str] = field(default_factory=list)   # ignore / modules_to_not_convert / llm_int8_skip_modules
    skip_style: str = "substring"    # how entries match: "substring" (AWQ, bnb) or "exact" (compressed-tensors)
    targets: list[str] = field(default_factory=list)  # compressed-tensors config_groups targets
    dynamic: dict = field(default_factory=dict)      # gptqmodel per-module overrides ("-:" excludes)
    block: tuple[int, int] | None = None             # fp8 weight_block_size / a block strategy
    strategy: str | None = None                      # compressed-tensors: tensor / channel / group / block
    kv_cache: dict | None = None                     # compressed-tensors kv_cache_scheme
    double_quant: bool = False                       # bitsandbytes bnb_4bit_use_double_quant

    @property
    def version(self) -> int:
        """GPTQ zero-point convention: 1 stores z - 1 (checkpoint_format "gptq"), 2 stores z."""
        return 2 if self.fmt == "gptq_v2" else 1

    def excluded(self, prefix: str) -> bool:
        """True when the config says this module stays in float."""
        short = prefix[len("model."):] if prefix.startswith("model.") else prefix
        for entry in self.skip:
            if entry.startswith("re:"):
                if _match(entry[3:], prefix) or _match(entry[3:], short):
                    return True
            elif self.skip_style == "exact":
                if entry in (prefix, short):
                    return True
            elif entry and entry in prefix:
                return True
        return any(key.startswith("-:") and _match(key[2:], prefix) for key in self.dynamic)

    def targeted(self, prefix: str) -> bool:
        """True when a compressed-tensors config group covers this module (other formats: every linear)."""
        if not self.targets:
            return True
        return any(t == "Linear" or t in (prefix, prefix.split(".")[-1]) or
                   (t.startswith("re:") and _match(t[3:], prefix)) for t in self.targets)

    def bits_for(self, prefix: str) -> int | None:
        """gptqmodel's `dynamic` may give one module other bits ("+:regex" or a plain regex key)."""
        for key, over in self.dynamic.items():
            if isinstance(over, dict) and not key.startswith("-:") and _match(key.removeprefix("+:"), prefix):
                if isinstance(over.get("bits"), int):
                    return over["bits"]
        return self.bits

    def group_for(self, prefix: str) -> int | None:
        for key, over in self.dynamic.items():
            if isinstance(over, dict) and not key.startswith("-:") and _match(key.removeprefix("+:"), prefix):
                if isinstance(over.get("group_size"), int):
                    return over["group_size"]
        return self.group_size


def _match(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except (re.error, RecursionError):
        return False


def _int(qc: dict, keys: tuple[str, ...], problems: list[ConfigProblem], allowed=None, default=None):
    for key in keys:
        if qc.get(key) is not None:     # null is what pydantic-dumped configs write for "not set"
            value = qc[key]
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(ConfigProblem(key, f"{key} must be an integer, found {value!r}"))
                return None
            if allowed is not None and value not in allowed:
                problems.append(ConfigProblem(key, f"{key} = {value} is not one of {list(allowed)}"))
                return None
            return value
    return default


def _group(qc: dict, keys: tuple[str, ...], problems: list[ConfigProblem]) -> int | None:
    value = _int(qc, keys, problems)
    if value is not None and value != -1 and not 0 < value <= MAX_GROUP:
        key = next(k for k in keys if k in qc)
        problems.append(ConfigProblem(key, f"{key} = {value}: a group size is -1 (per channel) or 1..{MAX_GROUP}"))
        return None
    return value


def _names(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse_scheme(qc) -> tuple[QuantScheme | None, list[ConfigProblem]]:
    """(scheme, problems) for a quantization_config; scheme None when the method is unknown or unusable."""
    if not isinstance(qc, dict):
        return None, [ConfigProblem("", f"quantization_config must be an object, found {type(qc).__name__}")]
    method = qc.get("quant_method")
    if method not in METHODS:
        return None, [ConfigProblem("quant_method", f"quant_method {method!r} is not one llmdoctor reads "
                                                    f"({', '.join(METHODS)})")]
    problems: list[ConfigProblem] = []
    parse = {"gptq": _gptq, "awq": _awq, "compressed-tensors": _compressed, "fp8": _fp8,
             "bitsandbytes": _bnb}[method]
    scheme = parse(qc, problems)
    return scheme, problems


def _gptq(qc: dict, problems: list[ConfigProblem]) -> QuantScheme:
    fmt = qc.get("checkpoint_format", "gptq")
    if fmt not in GPTQ_FORMATS:
        problems.append(ConfigProblem("checkpoint_format", f"checkpoint_format {fmt!r} is not one of "
                                                           f"{list(GPTQ_FORMATS)}"))
        fmt = "gptq"
    dynamic = qc.get("dynamic") if isinstance(qc.get("dynamic"), dict) else {}
    return QuantScheme("gptq", fmt, _int(qc, ("bits",), problems, BITS["gptq"]),
                       _group(qc, ("group_size",), problems, ), sym=qc.get("sym", True) is not False,
                       desc_act=qc.get("desc_act") is True, lm_head=qc.get("lm_head") is True, dynamic=dynamic,
                       skip=_names(qc.get("modules_to_not_convert")))


def _awq(qc: dict, problems: list[ConfigProblem]) -> QuantScheme:
    version = str(qc.get("version", "gemm")).lower()
    if version not in AWQ_VERSIONS:
        problems.append(ConfigProblem("version", f"AWQ version {version!r} is not one of {list(AWQ_VERSIONS)}"))
        version = "gemm"
    zero_point = qc.get("zero_point", True) is not False
    return QuantScheme("awq", version, _int(qc, ("bits", "w_bit"), problems, BITS["awq"]),
                       _group(qc, ("group_size", "q_group_size"), problems), sym=not zero_point,
                       skip=_names(qc.get("modules_to_not_convert")))


def _compressed(qc: dict, problems: list[ConfigProblem]) -> QuantScheme:
    fmt = qc.get("format")
    groups = qc.get("config_groups")
    weights, targets = None, []
    if isinstance(groups, dict):
        for group in groups.values():
            if isinstance(group, dict) and isinstance(group.get("weights"), dict):
                weights = weights or group["weights"]
                targets += _names(group.get("targets"))
                fmt = group.get("format") or fmt
    if fmt not in CT_FORMATS:
        problems.append(ConfigProblem("format", f"compressed-tensors format {fmt!r} is not one of {list(CT_FORMATS)}"))
    if weights is None:
        problems.append(ConfigProblem("config_groups", "no config group declares weight quantization"))
        weights = {}
    bits = _int(weights, ("num_bits",), problems)
    if bits is not None and not 1 < bits <= 8:
        problems.append(ConfigProblem("config_groups", f"weights.num_bits = {bits}: expected 2..8"))
        bits = None
    block = weights.get("block_structure")
    strategy = weights.get("strategy")
    kv = qc.get("kv_cache_scheme")
    return QuantScheme("compressed-tensors", str(fmt), bits, _group(weights, ("group_size",), problems),
                       sym=weights.get("symmetric", True) is not False,
                       desc_act=weights.get("actorder") in ("group", "weight", True), skip=_names(qc.get("ignore")),
                       skip_style="exact", targets=targets or ["Linear"], strategy=strategy,
                       block=_block(block, "config_groups", problems) if block is not None else None,
                       kv_cache=kv if isinstance(kv, dict) else None)


def _block(value, key: str, problems: list[ConfigProblem]) -> tuple[int, int] | None:
    if (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                             and 0 < v <= MAX_GROUP for v in value)):
        return value[0], value[1]
    problems.append(ConfigProblem(key, f"{key}: block size {value!r} is not two positive integers"))
    return None


def _fp8(qc: dict, problems: list[ConfigProblem]) -> QuantScheme:
    block = qc.get("weight_block_size")
    return QuantScheme("fp8", "fp8", 8, None, skip=_names(qc.get("modules_to_not_convert")),
                       block=_block(block, "weight_block_size", problems) if block is not None else None)


def _bnb(qc: dict, problems: list[ConfigProblem]) -> QuantScheme:
    if qc.get("load_in_8bit") is True:
        kind = "int8"
    else:
        kind = qc.get("bnb_4bit_quant_type", "fp4")
        if kind not in BNB_TYPES:
            problems.append(ConfigProblem("bnb_4bit_quant_type", f"bnb_4bit_quant_type {kind!r} is not one of "
                                                                 f"{list(BNB_TYPES)}"))
            kind = "nf4"
    return QuantScheme("bitsandbytes", kind, 8 if kind == "int8" else 4, None,
                       skip=_names(qc.get("llm_int8_skip_modules")),
                       double_quant=qc.get("bnb_4bit_use_double_quant") is True)
