"""Config checks of the MLA (DeepSeek-V2/V3, Kimi K2) and GLM-4.5 families (CFG020-CFG024): the fields these
families add are present and well typed, agree with the stored tensors (latent ranks, head dims, which layers
hold experts, the router's correction bias) and describe a routing that can run (groups vs experts).

Static: config.json and the tensor table's names and shapes, nothing loaded. Defaults are transformers'
(reference_engine/core/families/mla/deepseek.py DEFAULTS), the ones a missing field silently takes.
"""
from __future__ import annotations

from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key
from reference_engine.core.families.mla.deepseek import DEFAULTS, GLM, V2, V3

MLA_ARCHS = (V2, V3)
# field -> kind: "int" (>= 1), "int0" (>= 0), "int?" (>= 1 or null), "even" (>= 2, even), "number", "bool"
MLA_FIELDS = {"kv_lora_rank": "int", "q_lora_rank": "int?", "qk_nope_head_dim": "int0", "qk_rope_head_dim": "even",
              "v_head_dim": "int"}
MOE_FIELDS = {"n_routed_experts": "int", "num_experts_per_tok": "int", "n_shared_experts": "int0",
              "moe_intermediate_size": "int", "first_k_dense_replace": "int0", "moe_layer_freq": "int",
              "n_group": "int?", "topk_group": "int?", "routed_scaling_factor": "number", "norm_topk_prob": "bool"}
OWN_FIELDS = {V2: {"topk_method": "str"}, V3: {"rope_interleave": "bool"},
              GLM: {"use_qk_norm": "bool", "partial_rotary_factor": "number"}}
# absent, these take transformers' default silently: a checkpoint trained otherwise runs wrong
SHAPE_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "n_routed_experts",
                "num_experts_per_tok")
V2_METHODS = ("greedy", "group_limited_greedy")
KIND_WORDS = {"int": "a positive integer", "int0": "a non-negative integer", "int?": "a positive integer or null",
              "even": "a positive even integer", "number": "a number", "bool": "true or false",
              "str": "a string"}



def _fits(kind: str, v) -> bool:
    is_int = isinstance(v, int) and not isinstance(v, bool)
    return {"int": is_int and v >= 1, "int0": is_int and v >= 0, "int?": v is None or (is_int and v >= 1),
            "even": is_int and v >= 2 and v % 2 == 0, "bool": isinstance(v, bool), "str": isinstance(v, str),
            "number": isinstance(v, (int, float)) and not isinstance(v, bool)}[kind]


def family_fields(ctx) -> tuple[str, dict]:
    arch = (ctx.raw_config.get("architectures") or [None])[0]
    if arch not in (*MLA_ARCHS, GLM):
        raise Skip("not a DeepSeek-V2/V3, Kimi K2 or GLM-4.5 model")
    fields = {**(MLA_FIELDS if arch in MLA_ARCHS else {}), **MOE_FIELDS, **OWN_FIELDS[arch]}
    return arch, fields


def well_typed(ctx) -> tuple[str, dict]:
    """(architecture, raw) once every field of the family is usable; Skip otherwise (CFG020 reports it)."""
    arch, fields = family_fields(ctx)
    raw = ctx.raw_config
    if any(k in raw and not _fits(kind, raw[k]) for k, kind in fields.items()):
        raise Skip("config.json fields of this family are malformed (CFG020)")
    return arch, {**DEFAULTS[arch], "num_experts_per_tok": 1, "moe_layer_freq": 1, **raw}


@check("CFG020", category="config", severity="error", needs=("config",),
       hint="Restore the family's fields (kv_lora_rank, qk_*_head_dim, n_routed_experts, n_group, ...) from the "
            "original config.json, with their JSON types.")
def family_fields_typed(ctx):
    """The fields MLA and GLM-4.5 models add to config.json are present and of the right type.

    DeepSeek-V2/V3, Kimi K2 and GLM-4.5 read a dozen fields of their own: the latent ranks (`kv_lora_rank`,
    `q_lora_rank`, null for DeepSeek-V2-Lite's plain q_proj), the decoupled head dims (`qk_nope_head_dim`,
    `qk_rope_head_dim`, `v_head_dim`), and the MoE (`n_routed_experts`, `n_group`, `topk_group`,
    `routed_scaling_factor`, `first_k_dense_replace`, ...). A value of the wrong type ("16" for 16, a float
    rank) makes loaders fail deep in a reshape; a missing one silently takes transformers' default (a
    512-rank latent, 256 experts), which fits no checkpoint but the original DeepSeek-V3's.

    Remedy: copy the field from the original model's config.json.
    """
    arch, fields = family_fields(ctx)
    raw = ctx.raw_config
    for k, kind in fields.items():
        if k in raw and not _fits(kind, raw[k]):
            yield Problem(f"'{k}' must be {KIND_WORDS[kind]}, found {raw[k]!r}", evidence={k: repr(raw[k])},
                          location=config_key(k))
        elif k not in raw and k in SHAPE_FIELDS and k in DEFAULTS[arch]:
            yield Problem(f"'{k}' is missing: transformers assumes {DEFAULTS[arch][k]}", severity="warning",
                          evidence={k: None, "assumed": DEFAULTS[arch][k]}, location=config_key(k))
    if arch == V2 and isinstance(raw.get("topk_method"), str) and raw["topk_method"] not in V2_METHODS:
        yield Problem(f"topk_method {raw['topk_method']!r} is not one DeepSeek-V2 routes with "
                      f"({', '.join(V2_METHODS)})",
                      evidence={"topk_method": raw["topk_method"]}, location=config_key("topk_method"))
    factor = raw.get("partial_rotary_factor")
    if arch == GLM and _fits("number", factor) and not 0 < factor <= 1:
        yield Problem(f"partial_rotary_factor {factor} must be in (0, 1]", evidence={"partial_rotary_factor": factor},
                      location=config_key("partial_rotary_factor"))


@check("CFG022", category="config", severity="error", needs=("config",),
       hint="Set n_group, topk_group and num_experts_per_tok as the original config.json: n_group divides "
            "n_routed_experts, topk_group <= n_group, num_experts_per_tok <= topk_group * experts per group.")
def routing_groups_fit(ctx):
    """Group-limited routing's numbers fit the experts: `n_group` divides `n_routed_experts`, `topk_group` <=
    `n_group`, and the kept groups hold at least `num_experts_per_tok` experts.

    DeepSeek-V3, Kimi K2 and GLM-4.5 (noaux_tc) and DeepSeek-V2 (group_limited_greedy) view the router scores
    as [n_group, experts / n_group] and keep each token's `topk_group` best groups before the top-k. A group
    count that does not divide the experts fails that view ("shape is invalid"); keeping more groups than
    exist fails torch.topk; and when the kept groups hold fewer experts than the top-k, the top-k picks
    masked (-inf) experts. noaux_tc ranks a group by its two best experts, so it needs two per group.

    Remedy: restore the numbers from the model card or the original config.json.
    """
    arch, raw = well_typed(ctx)
    if arch == V2 and raw.get("topk_method") != "group_limited_greedy":
        raise Skip("DeepSeek-V2 greedy routing has no groups")
    experts, top_k = raw["n_routed_experts"], raw["num_experts_per_tok"]
    n_group, topk_group = raw.get("n_group") or 1, raw.get("topk_group") or 1
    ev = {"n_routed_experts": experts, "n_group": n_group, "topk_group": topk_group, "num_experts_per_tok": top_k}
    if experts % n_group:
        yield Problem(f"n_group {n_group} does not divide n_routed_experts {experts}", evidence=ev,
                      location=config_key("n_group"))
        return
    if topk_group > n_group:
        yield Problem(f"topk_group {topk_group} is more than the {n_group} groups", evidence=ev,
                      location=config_key("topk_group"))
        return
    per_group = experts // n_group
    if top_k > topk_group * per_group:
        yield Problem(f"num_experts_per_tok {top_k} is more than the {topk_group} kept group(s) of {per_group} "
                      f"experts hold", evidence=ev, location=config_key("num_experts_per_tok"))
    if arch != V2 and per_group < 2:
        yield Problem(f"n_group {n_group} leaves {per_group} expert per group; noaux_tc ranks groups by their "
                      f"two best experts", evidence=ev, location=config_key("n_group"))
