"""LoRA adapter checks (LRA): the adapter read against the base it is run on, statically (headers and the
adapter's own small tensors; no engine). peft loads with strict=False, so most of these faults load without
a word and surface, if ever, as a quietly different model. Serving notes for vLLM and llama.cpp are in
checks/adapter/serving.py."""
from __future__ import annotations

from pathlib import Path

from checks.adapter.scan import (base_modules, expected_factor_shapes, finite_problem, layer_of,
                                          target_reach, update_ratio)
from checks.catalogue.inputs import ResourceError
from checks.catalogue.locations import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_key, adapter_tensor
from checks.catalogue.registry import Problem, check
from findings import Location

CONFIG, WEIGHTS = ADAPTER_CONFIG, ADAPTER_WEIGHTS
ROLE_NAMES = {"A": "lora_A", "B": "lora_B", "embedding_A": "lora_embedding_A", "embedding_B": "lora_embedding_B"}


@check("LRA001", category="adapter", severity="error", needs=("adapter",),
       hint="Save the adapter with peft's save_pretrained(..., safe_serialization=True) and a valid "
            "adapter_config.json.")
def adapter_readable(ctx):
    """The adapter directory can be read: adapter_config.json and adapter_model.safetensors are well formed.

    A pickle-only adapter (adapter_model.bin) is refused and never unpickled: loading it would run whatever
    code the pickle holds. A truncated or malformed safetensors header, a config with wrong types, or an
    adapter kind other than LoRA is reported here, and the other adapter checks are skipped."""
    try:
        ctx.adapter
    except ResourceError as e:
        pickled = [name for name in ("adapter_model.bin", "adapter_model.pt") if name in e.message]
        where = pickled[0] if pickled else WEIGHTS if WEIGHTS in e.message else CONFIG
        yield Problem(f"the adapter cannot be read: {e.message}", location=Location(file=where))


@check("LRA002", category="adapter", severity="error", needs=("adapter",),
       hint="List the base's real module names in target_modules (e.g. q_proj, v_proj for Llama-style models; "
            "W_pack and c_attn exist only in Baichuan and GPT-2).")
def targets_absent(ctx):
    """Target modules, layers or stored tensors that name nothing in the base: the adapter changes nothing there.

    peft matches target_modules by name suffix and loads the weights with strict=False, so an adapter aimed at
    another architecture's names (Baichuan's W_pack, GPT-2's c_attn on a Llama) or at layers the base does
    not have applies to nothing, silently (LlamaFactory#181)."""
    adapter, names = ctx.adapter, ctx.base_weights.names
    modules = base_modules(names)
    for target, reached in target_reach(adapter, modules).items():
        if not reached:
            yield Problem(f"target module {target!r} matches no module of the base: the adapter changes nothing "
                          f"there", evidence={"target": target, "base_modules_like": _similar(modules)},
                          location=adapter_key("target_modules"))
    layers = ctx.config.num_hidden_layers
    beyond = [i for i in adapter.config.layers_to_transform or [] if not 0 <= i < layers]
    if beyond:
        yield Problem(f"layers_to_transform names layer(s) {beyond} but the base has {layers} layers",
                      evidence={"layers": beyond, "base_layers": layers}, location=adapter_key("layers_to_transform"))
    base = set(names)
    for module in adapter.modules.values():
        if module.weight not in base:
            key = next(iter(module.keys.values()))
            yield Problem(f"{module.name}: stored in the adapter but the base has no {module.weight}",
                          evidence={"tensor": key}, location=adapter_tensor(key))
    for key in adapter.unknown:
        yield Problem(f"{key}: not a LoRA, DoRA or modules_to_save tensor; peft ignores it",
                      severity="warning", location=adapter_tensor(key))


def _similar(modules: list[str]) -> list[str]:
    return sorted({m.rsplit(".", 1)[-1] for m in modules if layer_of(m) is not None})[:12]


@check("LRA003", category="adapter", severity="error", needs=("adapter", "config"),
       hint="The adapter was trained on another base: run it on the base named in base_model_name_or_path.")
def shapes_do_not_fit(ctx):
    """lora_A / lora_B (or a saved module copy, or DoRA's magnitude) whose shape does not fit the base weight.

    An adapter trained on another base with matching module names (a 1B adapter on the 3B base) loads in peft
    only when the shapes happen to agree (peft#1932); when they do not, it fails at load. Each module is named
    with the shapes expected and found."""
    adapter, base = ctx.adapter, ctx.base_weights
    for module in adapter.modules.values():
        if module.weight not in base:
            continue      # LRA002
        shape = tuple(base.info(module.weight).shape)
        rank = adapter.rank_in_tensors(module) or 1
        want = expected_factor_shapes(module, shape, rank, adapter.config.fan_in_fan_out)
        for role, expected in want.items():
            key = module.keys.get(role)
            if key is None:
                continue
            found = tuple(adapter.tensors.info(key).shape)
            if found != expected:
                yield Problem(f"{module.name}: {ROLE_NAMES[role]} {list(found)} does not fit the base weight "
                              f"{list(shape)} (expected {list(expected)})",
                              evidence={"tensor": key, "shape": found, "expected": expected, "base_shape": shape},
                              location=adapter_tensor(key))
        yield from _copy_and_magnitude(adapter, module, shape)


def _copy_and_magnitude(adapter, module, shape):
    for role in ("copy", "saved_copy", "base", "original"):
        key = module.keys.get(role)
        if key is not None:
            found = tuple(adapter.tensors.info(key).shape)
            if found[1:] != shape[1:]:
                yield Problem(f"{module.name}: saved copy {list(found)} does not fit the base weight {list(shape)}",
                              evidence={"tensor": key, "shape": found, "base_shape": shape},
                              location=adapter_tensor(key))
    key = module.keys.get("magnitude")
    if key is not None:
        found = tuple(adapter.tensors.info(key).shape)
        if found not in ((shape[0],), (1, shape[0])):
            yield Problem(f"{module.name}: lora_magnitude_vector {list(found)} for {shape[0]} output rows",
                          evidence={"tensor": key, "shape": found}, location=adapter_tensor(key))


@check("LRA004", category="adapter", severity="error", needs=("adapter",),
       hint="Set r (or rank_pattern for the modules trained with another rank) to the rank the tensors carry.")
def rank_mismatch(ctx):
    """The rank the tensors carry differs from adapter_config.json's r / rank_pattern, or A and B disagree.

    peft builds each module with the configured rank and then loads the tensors: a mismatch fails at load, and
    the scale alpha/r is computed from the configured rank, so an edited r silently rescales the update."""
    adapter = ctx.adapter
    for module in adapter.lora_modules():
        if module.lora_a is None or module.lora_b is None:
            continue      # LRA005
        a, b = adapter.tensors.info(module.lora_a).shape, adapter.tensors.info(module.lora_b).shape
        if len(a) != 2 or len(b) != 2:
            continue
        configured = adapter.config.rank_of(module.name)
        if a[0] != b[1]:
            yield Problem(f"{module.name}: lora_A has rank {a[0]} but lora_B rank {b[1]}",
                          evidence={"lora_A": list(a), "lora_B": list(b)}, location=adapter_tensor(module.lora_a))
        elif a[0] != configured:
            key = "rank_pattern" if adapter.config.pattern_key(adapter.config.rank_pattern, module.name) else "r"
            yield Problem(f"{module.name}: tensors carry rank {a[0]} but adapter_config.json says {key} = "
                          f"{configured}", evidence={"tensor_rank": a[0], "configured": configured},
                          location=adapter_key(key))


@check("LRA005", category="adapter", severity="error", needs=("adapter",),
       hint="Re-save the adapter from the trained PeftModel: every module needs both lora_A and lora_B.")
def missing_partner(ctx):
    """A lora_B without its lora_A or the reverse, or DoRA magnitudes that do not match use_dora.

    A half-saved module (a filtered state dict, a botched conversion) cannot be merged; peft loads it with
    strict=False and keeps the other factor at its initial value: lora_B zero means no change at all."""
    adapter = ctx.adapter
    dora = adapter.config.use_dora
    for module in adapter.modules.values():
        a, b, m = module.lora_a, module.lora_b, module.keys.get("magnitude")
        if (a is None) != (b is None):
            have, miss = ("lora_A", "lora_B") if a is not None else ("lora_B", "lora_A")
            yield Problem(f"{module.name}: {have} without its {miss}", location=adapter_tensor(a or b))
        if module.has_lora and dora and m is None:
            yield Problem(f"{module.name}: use_dora is true but no lora_magnitude_vector is stored",
                          location=adapter_tensor(a or b))
        if m is not None and not dora:
            yield Problem(f"{module.name}: a lora_magnitude_vector is stored but use_dora is false: the DoRA "
                          f"scaling would be dropped", location=adapter_key("use_dora"))


@check("LRA006", category="adapter", severity="error", needs=("adapter",),
       hint="Retrain or restore from a checkpoint before the divergence; check the learning rate and precision.")
def non_finite(ctx):
    """NaN or Inf in an adapter tensor: every output of the adapted modules becomes NaN.

    A LoRA update is added to every output of the module it targets, so one non-finite value in lora_A,
    lora_B, a DoRA magnitude or a saved embedding copy turns that module's outputs, and from there every
    logit, into NaN. It usually means training diverged (a learning rate too high for the rank and alpha,
    or fp16 overflow) and the adapter was saved anyway. The finding names the tensor; restore an earlier
    checkpoint or retrain.
    """
    adapter = ctx.adapter
    for key in adapter.tensors.names:
        problem = finite_problem(adapter.tensors.get(key))
        if problem:
            yield Problem(f"{key}: {problem}", location=adapter_tensor(key))


@check("LRA007", category="adapter", severity="error", needs=("adapter",),
       hint="Save the adapter after training (peft initialises every lora_B to zero, so an untrained adapter "
            "is the base model).")
def untrained(ctx):
    """Every lora_B is zero: the adapter was saved before training and changes nothing.

    peft initialises lora_B to zeros so that training starts at the base model; an adapter whose lora_B are
    all still zero (saved from the wrong process, before the first step, or with the trained weights lost)
    merges to exactly the base."""
    adapter = ctx.adapter
    keys = [m.lora_b for m in adapter.lora_modules() if m.lora_b is not None]
    if keys and all(not bool(adapter.tensors.get(k).any()) for k in keys):
        yield Problem(f"all {len(keys)} lora_B tensors are zero: the adapter changes nothing (saved before "
                      f"training?)", evidence={"lora_B": len(keys)}, location=adapter_tensor(keys[0]))


@check("LRA008", category="adapter", severity="warning", needs=("adapter",),
       hint="Check lora_alpha against r (scale = alpha/r, or alpha/sqrt(r) with use_rslora).")
def update_dwarfs_weight(ctx):
    """An update s * B @ A whose norm dwarfs the base weight's (alpha/r far too large, a diverged run).

    A trained LoRA update is a small correction, typically a few percent of the weight's Frobenius norm; one
    several times the weight replaces the model. Threshold: max_ratio (default 2.0)."""
    adapter, base = ctx.adapter, ctx.base_weights
    limit = ctx.threshold("LRA008", "max_ratio", 2.0)
    worst = []
    for module in adapter.lora_modules():
        if module.weight not in base or module.keys.get("base"):
            continue
        norm = float(base.get(module.weight).double().norm())
        ratio = update_ratio(adapter, module, norm)
        if ratio is not None and ratio > limit:
            worst.append((ratio, module))
    if worst:
        worst.sort(key=lambda x: -x[0])
        ratio, module = worst[0]
        yield Problem(f"{len(worst)} module(s) have an update over {limit:g}x the base weight's norm, the largest "
                      f"{module.name} ({ratio:.1f}x; scale {adapter.config.scale_of(module.name):g})",
                      evidence={"modules": [{"module": m.name, "ratio": round(r, 3)} for r, m in worst[:10]],
                                "lora_alpha": adapter.config.lora_alpha, "r": adapter.config.r},
                      location=adapter_key("lora_alpha"))


@check("LRA011", category="adapter", severity="warning", needs=("adapter", "config"),
       hint="Run the adapter on the base it was trained on (base_model_name_or_path).")
def declared_base_differs(ctx):
    """base_model_name_or_path disagrees with the base given: another model, or a 4-bit (bnb) base.

    An adapter trained on a -bnb-4bit base learned corrections to the quantized weights; merged into the full
    precision base it behaves differently (unsloth-zoo PR #810, peft#2321). An adapter trained on another
    base with the same module names loads without a word (peft#1932)."""
    declared_class = (ctx.adapter.config.raw.get("auto_mapping") or {}).get("base_model_class")
    if isinstance(declared_class, str) and declared_class != ctx.config.architecture:
        yield Problem(f"the adapter was trained on a {declared_class} but the base is a {ctx.config.architecture}",
                      evidence={"declared": declared_class, "base": ctx.config.architecture},
                      location=adapter_key("auto_mapping"))
    declared = ctx.adapter.config.base_model_name_or_path
    if not declared:
        return
    given = ctx.model_dir.resolve()
    if Path(declared).exists():
        if Path(declared).resolve() != given:
            yield Problem(f"base_model_name_or_path is {declared} but the base given is {ctx.model_dir}",
                          evidence={"declared": declared, "given": str(ctx.model_dir)},
                          location=adapter_key("base_model_name_or_path"))
        return
    last = declared.rstrip("/").rsplit("/", 1)[-1].lower()
    if ("bnb-4bit" in last or "4bit" in last) and not ctx.raw_config.get("quantization_config"):
        yield Problem(f"the adapter was trained on a 4-bit base ({declared}) and is run on {ctx.model_dir.name}: "
                      f"merged into full-precision weights it behaves differently", location=adapter_key(
                          "base_model_name_or_path"), evidence={"declared": declared})
        return
    names = {p.lower() for p in given.parts} | {str(ctx.raw_config.get("_name_or_path", "")).rstrip("/")
                                                .rsplit("/", 1)[-1].lower()}
    if not any(last == n or last in n.split("--") for n in names if n):
        yield Problem(f"base_model_name_or_path is {declared!r} but the base given is {ctx.model_dir}",
                      evidence={"declared": declared, "given": str(ctx.model_dir)},
                      location=adapter_key("base_model_name_or_path"))
