"""The one reader of config.json's `quantization_config`, for the engine (methods.py raises the first problem)
and the QNT checks (QNT001 reports every problem at its key): `read_declaration(qc) -> (scheme, problems)`.

Key names follow each producer: AutoGPTQ/gptqmodel (bits, group_size, desc_act, sym, checkpoint_format,
lm_head, dynamic), AutoAWQ (bits|w_bit, group_size|q_group_size, zero_point, version), compressed-tensors
(config_groups with their own weights and format, format, ignore, kv_cache_scheme, sparsity_config),
DeepSeek-style fp8 (weight_block_size, activation_scheme), transformers' bitsandbytes and mxfp4 (gpt-oss:
modules_to_not_convert as transformers matches them). A JSON null is
"not set" (what pydantic-dumped configs write). Never raises: a bad value is a ConfigProblem naming its key.
"""
from __future__ import annotations

from reference_engine.files.quant.scheme import ENGINE, UNKNOWN, ConfigProblem, QuantScheme, SchemeGroup

METHODS = ("gptq", "awq", "compressed-tensors", "fp8", "bitsandbytes", "mxfp4")
GPTQ_BITS = (2, 3, 4, 8)
GPTQ_FORMATS = ("gptq", "gptq_v2")
AWQ_VERSIONS = ("gemm", "exllama", "ipex")   # exllama/ipex backends read GEMM-packed checkpoints
AWQ_OTHER = ("gemv", "gemv_fast", "marlin")  # AutoAWQ layouts of their own, which the engine does not read
CT_FORMATS = ("pack-quantized", "nvfp4-pack-quantized", "float-quantized", "int-quantized", "naive-quantized",
              "dense", "mixed-precision")    # dense: float weights (frozen); mixed-precision: per-group formats
BNB_TYPES = ("nf4", "fp4")
MAX_GROUP = 1 << 20            # no producer groups more than this many input channels


def read_declaration(qc) -> tuple[QuantScheme | None, list[ConfigProblem]]:
    """(scheme, problems); scheme None when the method is unknown or the declaration is not an object."""
    if not isinstance(qc, dict):
        return None, [ConfigProblem("", f"quantization_config must be an object, found {type(qc).__name__}")]
    method = qc.get("quant_method")
    if method not in METHODS:
        return None, [ConfigProblem("quant_method", f"quantization_config.quant_method {method!r} is not one "
                                                    f"llmdoctor reads (supported: {', '.join(METHODS)})", UNKNOWN)]
    problems: list[ConfigProblem] = []
    read = {"gptq": _gptq, "awq": _awq, "compressed-tensors": _compressed, "fp8": _fp8, "bitsandbytes": _bnb,
            "mxfp4": _mxfp4}
    return read[method](qc, problems), problems


def _int(qc: dict, keys: tuple[str, ...], problems: list, allowed=None, default=None, where: str = ""):
    """The first of `keys` set, checked to be an integer (in `allowed`: else an UNKNOWN problem)."""
    for key in keys:
        if qc.get(key) is not None:
            value = qc[key]
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(ConfigProblem(where + key, f"quantization_config.{where}{key} must be an integer, "
                                                           f"found {value!r}"))
                return None
            if allowed is not None and value not in allowed:
                problems.append(ConfigProblem(where + key, f"quantization_config.{where}{key} = {value} is not "
                                                           f"supported (supported: {', '.join(map(str, allowed))})",
                                              UNKNOWN))
                return None
            return value
    return default


def _group_size(qc: dict, keys: tuple[str, ...], problems: list, default=None, where: str = "") -> int | None:
    value = _int(qc, keys, problems, default=default, where=where)
    if value is not None and value != -1 and not 0 < value <= MAX_GROUP:
        key = where + next((k for k in keys if qc.get(k) is not None), keys[0])
        problems.append(ConfigProblem(key, f"quantization_config.{key} = {value}: a group size is -1 (per channel) "
                                           f"or 1..{MAX_GROUP}"))
        return None
    return value


def _block(value, key: str, problems: list) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                            and 0 < v <= MAX_GROUP for v in value):
        return value[0], value[1]
    problems.append(ConfigProblem(key, f"quantization_config.{key} must be [rows, cols] of positive integers, "
                                       f"found {value!r}"))
    return None


def _names(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _gptq(qc: dict, problems: list) -> QuantScheme:
    fmt = qc.get("checkpoint_format") or "gptq"
    if fmt not in GPTQ_FORMATS:
        problems.append(ConfigProblem("checkpoint_format", f"quantization_config.checkpoint_format {fmt!r} is not "
                                                           f"supported (gptq, gptq_v2)", UNKNOWN))
        fmt = "gptq"
    bits = _int(qc, ("bits",), problems, GPTQ_BITS)
    if bits is None and qc.get("bits") is None:
        problems.append(ConfigProblem("bits", "quantization_config.bits is missing"))
    dynamic = qc.get("dynamic") if isinstance(qc.get("dynamic"), dict) else {}
    if dynamic:
        problems.append(ConfigProblem("dynamic", "gptq 'dynamic' per-module overrides are not supported by "
                                                 "llmdoctor's engine", ENGINE))
    group = SchemeGroup("gptq", bits=bits, group_size=_group_size(qc, ("group_size",), problems, default=-1),
                        sym=qc.get("sym", True) is not False, actorder=qc.get("desc_act") is True)
    return QuantScheme("gptq", fmt, [group], lm_head=qc.get("lm_head") is True, dynamic=dynamic,
                       skip=_names(qc.get("modules_to_not_convert")))


def _awq(qc: dict, problems: list) -> QuantScheme:
    version = str(qc.get("version") or "gemm").lower()
    if version in AWQ_OTHER:
        problems.append(ConfigProblem("version", f"awq version {version!r} is not supported by llmdoctor's engine "
                                                 f"(it reads {', '.join(AWQ_VERSIONS)}: GEMM-packed)", ENGINE))
    elif version not in AWQ_VERSIONS:
        problems.append(ConfigProblem("version", f"quantization_config.version: awq version {version!r} is not one "
                                                 f"of {', '.join(AWQ_VERSIONS + AWQ_OTHER)}", UNKNOWN))
        version = "gemm"
    zero_point = qc.get("zero_point", True) is not False
    if not zero_point:
        problems.append(ConfigProblem("zero_point", "awq without zero points (zero_point: false) is not supported "
                                                    "by llmdoctor's engine", ENGINE))
    group = SchemeGroup("awq", bits=_int(qc, ("bits", "w_bit"), problems, (4,), default=4),
                        group_size=_group_size(qc, ("group_size", "q_group_size"), problems, default=128),
                        sym=not zero_point)
    return QuantScheme("awq", version, [group], skip=_names(qc.get("modules_to_not_convert")))


def _compressed(qc: dict, problems: list) -> QuantScheme:
    top = qc.get("format") or "dense"
    if not isinstance(top, str) or top not in CT_FORMATS:
        problems.append(ConfigProblem("format", f"quantization_config.format {top!r} is not a compressed-tensors "
                                                f"format llmdoctor reads ({', '.join(CT_FORMATS)})", UNKNOWN))
        top = str(top)
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict):
        problems.append(ConfigProblem("config_groups", "quantization_config.config_groups must be an object"))
        groups = {}
    if qc.get("ignore") is not None and not isinstance(qc.get("ignore"), list):
        problems.append(ConfigProblem("ignore", "quantization_config.ignore must be a list"))
    if qc.get("sparsity_config"):
        problems.append(ConfigProblem("sparsity_config", "compressed-tensors sparsity_config (sparse checkpoints) "
                                                         "is not supported by llmdoctor's engine", ENGINE))
    read = [_ct_group(str(name), group, top, problems) for name, group in groups.items()]
    read = [g for g in read if g is not None]
    if not read:
        problems.append(ConfigProblem("config_groups", "quantization_config.config_groups: no config group "
                                                       "declares weight quantization"))
    fmts = {g.fmt for g in read}
    kv = qc.get("kv_cache_scheme")
    return QuantScheme("compressed-tensors", fmts.pop() if len(fmts) == 1 else "mixed-precision", read,
                       skip=_names(qc.get("ignore")), skip_style="exact", kv_cache=kv if isinstance(kv, dict) else None)


def _ct_group(name: str, group, top: str, problems: list) -> SchemeGroup | None:
    where = f"config_groups.{name}."
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        return None                  # activation-only or malformed: no weights to dequantize
    fmt = group.get("format") or top
    if fmt != top and (not isinstance(fmt, str) or fmt not in CT_FORMATS):
        problems.append(ConfigProblem(where + "format", f"quantization_config.{where}format {fmt!r} is not a "
                                                        f"compressed-tensors format llmdoctor reads", UNKNOWN))
        fmt = str(fmt)
    w = group["weights"]
    bits = _int(w, ("num_bits",), problems, where=where + "weights.")
    if bits is not None and not 1 <= bits <= 8:
        problems.append(ConfigProblem(where + "weights.num_bits", f"quantization_config.{where}weights.num_bits = "
                                                                  f"{bits}: expected 1..8"))
        bits = None
    strategy = w.get("strategy") if isinstance(w.get("strategy"), str) else None
    group_size = _group_size(w, ("group_size",), problems, where=where + "weights.")
    if strategy in ("group", "tensor_group") and group_size is None and w.get("group_size") is None:
        problems.append(ConfigProblem(where + "weights.group_size", f"quantization_config.{where}weights: strategy "
                                                                    f"{strategy!r} without a group_size"))
    targets = tuple(_names(group.get("targets"))) or ("Linear",)
    return SchemeGroup(name, targets, fmt, bits, group_size, sym=w.get("symmetric", True) is not False,
                       actorder=w.get("actorder") in ("group", "weight", True),
                       kind=w.get("type") if w.get("type") in ("int", "float") else "int", strategy=strategy,
                       block=_block(w.get("block_structure"), where + "weights.block_structure", problems))


def _fp8(qc: dict, problems: list) -> QuantScheme:
    block = _block(qc.get("weight_block_size"), "weight_block_size", problems)
    if qc.get("activation_scheme", "dynamic") not in ("dynamic", "static"):
        problems.append(ConfigProblem("activation_scheme", f"quantization_config.activation_scheme "
                                                           f"{qc.get('activation_scheme')!r} is not supported "
                                                           f"(dynamic, static)", UNKNOWN))
    group = SchemeGroup("fp8", bits=8, kind="float", strategy="block" if block else "tensor", block=block)
    return QuantScheme("fp8", "fp8", [group], skip=_names(qc.get("modules_to_not_convert")))


def _bnb(qc: dict, problems: list) -> QuantScheme:
    if qc.get("load_in_8bit") is True or qc.get("_load_in_8bit") is True:
        kind = "int8"
        problems.append(ConfigProblem("load_in_8bit", "bitsandbytes 8-bit (LLM.int8) checkpoints are not supported "
                                                      "by llmdoctor's engine", ENGINE))
    else:
        if not (qc.get("load_in_4bit") or qc.get("_load_in_4bit")):
            problems.append(ConfigProblem("load_in_4bit", "bitsandbytes quantization_config sets neither "
                                                          "load_in_4bit nor load_in_8bit"))
        kind = qc.get("bnb_4bit_quant_type") or "fp4"
        if kind not in BNB_TYPES:
            problems.append(ConfigProblem("bnb_4bit_quant_type", f"quantization_config.bnb_4bit_quant_type "
                                                                  f"{kind!r} is not one of {', '.join(BNB_TYPES)}"))
            kind = "nf4"
    group = SchemeGroup("bitsandbytes", bits=8 if kind == "int8" else 4, kind=kind)
    return QuantScheme("bitsandbytes", kind, [group], skip=_names(qc.get("llm_int8_skip_modules")),
                       double_quant=qc.get("bnb_4bit_use_double_quant") is True)


def _mxfp4(qc: dict, problems: list) -> QuantScheme:
    skip = qc.get("modules_to_not_convert")
    if skip is not None and not isinstance(skip, list):
        problems.append(ConfigProblem("modules_to_not_convert", "quantization_config.modules_to_not_convert must "
                                                                "be a list of module names or patterns"))
    group = SchemeGroup("mxfp4", bits=4, group_size=32, kind="float")
    return QuantScheme("mxfp4", "mxfp4", [group], skip=_names(skip), skip_style="transformers")
