"""What a `quantization_config` declares, as the engine's format modules and the QNT checks both read it
(declaration.py builds it): the method and its format, bits, group size, symmetry, act-order, the modules
left in float, and for compressed-tensors each config group with its own weights and format, so a
mixed-precision checkpoint keeps every group's values. Per-module questions (`bits_for(prefix)`, ...) answer
from the group that targets the module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# ConfigProblem kinds: what the engine raises and how QNT001 reports it
INVALID = "invalid"        # a value that cannot be right: ModelDirError, a QNT001 error
UNKNOWN = "unknown"        # a method/format/width no loader llmdoctor knows reads: UnsupportedError, a QNT001 error
ENGINE = "engine"          # a real producer's declaration the engine does not dequantize: UnsupportedError,
                           # a QNT001 note (the file checks still read it; the engine-backed checks skip)


@dataclass(frozen=True)
class ConfigProblem:
    key: str                   # "bits" -> config.json quantization_config.bits
    message: str               # one line, naming the key
    kind: str = INVALID


@dataclass(frozen=True)
class SchemeGroup:
    """One set of weight arguments: a compressed-tensors config group, or the whole model for other methods."""
    name: str
    targets: tuple[str, ...] = ("Linear",)
    fmt: str = ""              # compressed-tensors: the group's format (else the top-level one)
    bits: int | None = None
    group_size: int | None = None    # -1: one group per output channel (the whole input)
    sym: bool = True
    actorder: bool = False
    kind: str = "int"          # compressed-tensors weights.type: int / float
    strategy: str | None = None      # tensor / channel / group / tensor_group / block
    block: tuple[int, int] | None = None


@dataclass
class QuantScheme:
    method: str
    fmt: str                   # gptq/gptq_v2, an AWQ version, a compressed-tensors format ("mixed"), fp8, nf4/fp4/int8
    groups: list[SchemeGroup] = field(default_factory=list)
    lm_head: bool = False            # GPTQ: lm_head quantized too
    skip: list[str] = field(default_factory=list)   # ignore / modules_to_not_convert / llm_int8_skip_modules
    skip_style: str = "substring"    # how entries match: "substring" (GPTQ, AWQ, fp8, bnb), "exact" (c-t),
                                     # "transformers" (mxfp4: should_convert_module's prefix/regex/suffix rule)
    dynamic: dict = field(default_factory=dict)      # gptqmodel per-module overrides ("-:" excludes)
    kv_cache: dict | None = None                     # compressed-tensors kv_cache_scheme
    double_quant: bool = False                       # bitsandbytes bnb_4bit_use_double_quant

    @property
    def version(self) -> int:
        """GPTQ zero-point convention: 1 stores z - 1 (checkpoint_format "gptq"), 2 stores z."""
        return 2 if self.fmt == "gptq_v2" else 1

    @property
    def targets(self) -> list[str]:
        return [t for g in self.groups for t in g.targets]

    # the model-wide value when every group agrees (None when groups differ: mixed precision)
    bits = property(lambda self: self._common("bits"))
    group_size = property(lambda self: self._common("group_size"))
    sym = property(lambda self: all(g.sym for g in self.groups))           # False when any group is asymmetric
    desc_act = property(lambda self: any(g.actorder for g in self.groups))
    strategy = property(lambda self: self._common("strategy"))
    block = property(lambda self: self._common("block"))

    def _common(self, attr: str, default=None):
        values = {getattr(g, attr) for g in self.groups}
        return values.pop() if len(values) == 1 else default

    def group_of(self, prefix: str) -> SchemeGroup | None:
        """The group whose targets match the module (the first, as compressed-tensors applies them)."""
        return next((g for g in self.groups if any(matches(t, prefix) for t in g.targets)), None)

    def targeted(self, prefix: str) -> bool:
        """True when a config group covers this module (other methods: every linear)."""
        return self.group_of(prefix) is not None

    def excluded(self, prefix: str) -> bool:
        """True when the config says this module stays in float."""
        short = prefix[len("model."):] if prefix.startswith("model.") else prefix
        for entry in self.skip:
            if entry.startswith("re:"):
                if _match(entry[3:], prefix) or _match(entry[3:], short):
                    return True
            elif self.skip_style == "exact":
                if matches(entry, prefix) or entry == short:
                    return True
            elif self.skip_style == "transformers":
                if _match(rf"(?:{entry})(?:(?<=\.)|(?=\.|$))", prefix) or prefix.endswith(entry):
                    return True
            elif entry and entry in prefix:
                return True
        return any(key.startswith("-:") and _match(key[2:], prefix) for key in self.dynamic)

    def _for(self, prefix: str, attr: str):
        """gptqmodel's `dynamic` may give one module other bits/group_size; compressed-tensors its group's."""
        for key, over in self.dynamic.items():
            if isinstance(over, dict) and not key.startswith("-:") and _match(key.removeprefix("+:"), prefix):
                if isinstance(over.get(attr), int) and not isinstance(over.get(attr), bool):
                    return over[attr]
        group = self.group_of(prefix)
        return getattr(group, attr) if group is not None else self._common(attr, getattr(SchemeGroup, attr))

    def bits_for(self, prefix: str) -> int | None:
        return self._for(prefix, "bits")

    def group_for(self, prefix: str) -> int | None:
        return self._for(prefix, "group_size")

    def sym_for(self, prefix: str) -> bool:
        return self._for(prefix, "sym")

    def desc_act_for(self, prefix: str) -> bool:
        return self._for(prefix, "actorder")

    def strategy_for(self, prefix: str) -> str | None:
        return self._for(prefix, "strategy")

    def block_for(self, prefix: str) -> tuple[int, int] | None:
        return self._for(prefix, "block")

    def fmt_for(self, prefix: str) -> str:
        group = self.group_of(prefix)
        return group.fmt if group is not None and group.fmt else self.fmt


def matches(target, module: str) -> bool:
    """A compressed-tensors target or ignore entry against a module name: "re:<regex>", a class name
    ("Linear": every decoder matrix but the embedding; "Embedding"), or the module's name (or its tail)."""
    if not isinstance(target, str) or not target:
        return False
    if target.startswith("re:"):
        return _match(target[3:], module)
    if target == "Linear":
        return not module.endswith("embed_tokens")
    if target == "Embedding":
        return module.endswith("embed_tokens")
    return module == target or module.endswith("." + target)


def _match(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except (re.error, RecursionError):
        return False
