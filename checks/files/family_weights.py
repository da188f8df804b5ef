"""Config-vs-tensor checks of the MLA (DeepSeek-V2/V3, Kimi K2) and GLM-4.5 families (CFG021, CFG023, CFG024):
the latent ranks and head dims match the stored projections, the layers config.json makes MoE are the ones
that store experts, and a noaux_tc router stores its e_score_correction_bias. Shapes from the tensor table's
headers; only the (tiny) bias vectors are read."""
from __future__ import annotations

import re

import torch

from checks.files.mla_config import MLA_ARCHS, well_typed
from checks.catalogue.registry import Problem, Skip, check
from checks.catalogue.locations import config_key, tensor
from reference_engine.core.families.mla.deepseek import V2, mla_plan, sparse_layers

# a stored MLA projection -> the config fields its shape comes from (first: where the finding points)
FIELDS_OF = {"kv_a_proj_with_mqa.weight": ("kv_lora_rank", "qk_rope_head_dim"),
             "kv_a_layernorm.weight": ("kv_lora_rank",),
             "kv_b_proj.weight": ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"),
             "q_a_proj.weight": ("q_lora_rank",), "q_a_layernorm.weight": ("q_lora_rank",),
             "q_b_proj.weight": ("qk_nope_head_dim", "qk_rope_head_dim", "q_lora_rank"),
             "q_proj.weight": ("qk_nope_head_dim", "qk_rope_head_dim"), "o_proj.weight": ("v_head_dim",)}
EXPERTS = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.")
ROUTER = re.compile(r"^model\.layers\.(\d+)\.mlp\.gate\.weight$")



@check("CFG021", category="config", severity="error", needs=("config", "weights"),
       hint="Set kv_lora_rank, q_lora_rank and the qk_nope/qk_rope/v head dims from the stored projections' "
            "shapes (or the original config.json).")
def mla_ranks_match_tensors(ctx):
    """The MLA ranks and head dims in config.json match the stored attention projections.

    MLA's projections are shaped by the config: kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim, hidden],
    kv_b_proj [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank], q_a_proj [q_lora_rank, hidden] and
    q_b_proj [heads * (qk_nope + qk_rope), q_lora_rank] (or one q_proj when q_lora_rank is null, as
    DeepSeek-V2-Lite), o_proj [hidden, heads * v_head_dim]. A rank or head dim that disagrees (a config
    copied from another size, V2-Lite's null q_lora_rank lost) fails loading with a size mismatch, or splits
    the latent and the rope key at the wrong place.

    Remedy: restore the named field; the evidence gives the stored shape it must produce.
    """
    arch, raw = well_typed(ctx)
    if arch not in MLA_ARCHS:
        raise Skip("not an MLA model")
    names, seen = set(ctx.weights.names), set()
    for n in range(ctx.config.num_hidden_layers):
        p = f"model.layers.{n}."
        for slot in mla_plan(p, ctx.config).values():
            name, shape = slot[0]
            suffix = name.split("self_attn.")[-1]
            fields = FIELDS_OF.get(suffix)
            if fields is None or suffix in seen:
                continue
            ev = {"tensor": name, "expected": list(shape), **{f: raw.get(f) for f in fields}}
            if name not in names:
                other = "q_a_proj.weight" if suffix == "q_proj.weight" else "q_proj.weight"
                if suffix.startswith("q_") and p + "self_attn." + other in names:
                    seen.update(k for k in FIELDS_OF if k.startswith("q_"))      # one finding for the q side
                    yield Problem(f"q_lora_rank {raw.get('q_lora_rank')!r} but layer {n} stores "
                                  f"self_attn.{other.split('.')[0]} instead of {suffix.split('.')[0]}",
                                  evidence=ev, location=config_key("q_lora_rank"))
                continue
            stored = list(ctx.weights.info(name).shape)
            if stored != list(shape):
                seen.add(suffix)
                values = ", ".join(str(raw.get(f)) for f in fields)
                yield Problem(f"{name} is {stored}, but {' / '.join(fields)} ({values}) give {list(shape)}",
                              evidence={**ev, "stored": stored}, location=config_key(fields[0]))


@check("CFG023", category="config", severity="error", needs=("config", "weights"),
       hint="Set first_k_dense_replace (and moe_layer_freq) so the MoE layers are the ones storing experts.")
def moe_layers_match_tensors(ctx):
    """The layers config.json makes MoE (from `first_k_dense_replace` on, on the `moe_layer_freq` grid) are the
    layers that store experts.

    DeepSeek-V3 keeps its first 3 layers dense, GLM-4.5 its first 1 (3 for GLM-4.5-Air's sibling sizes);
    the rest hold the routed and shared experts. A wrong `first_k_dense_replace` makes loaders look for
    experts in a dense layer (missing tensors) or ignore a MoE layer's experts (and build a dense MLP from
    nothing: random output).

    Remedy: count the dense layers in the checkpoint and set first_k_dense_replace to it.
    """
    _, raw = well_typed(ctx)
    stored = {int(m.group(1)) for name in ctx.weights.names if (m := EXPERTS.match(name))}
    declared = set(sparse_layers(ctx.config))
    if stored == declared:
        return
    first = min(stored) if stored else None
    yield Problem(f"config.json makes layers {_ranges(declared)} MoE (first_k_dense_replace "
                  f"{raw.get('first_k_dense_replace')}), the checkpoint stores experts in layers {_ranges(stored)}",
                  evidence={"first_k_dense_replace": raw.get("first_k_dense_replace"),
                            "first_stored_moe_layer": first, "moe_layer_freq": raw.get("moe_layer_freq")},
                  location=config_key("first_k_dense_replace"))


@check("CFG024", category="config", severity="error", needs=("config", "weights"),
       hint="Export mlp.gate.e_score_correction_bias with the router weights (it is a buffer, not a parameter).")
def router_bias_stored(ctx):
    """Every MoE layer of a noaux_tc model (DeepSeek-V3, Kimi K2, GLM-4.5) stores a finite
    `mlp.gate.e_score_correction_bias`.

    The bias decides which experts each token goes to (it is added to the sigmoid scores for the choice
    only). It is a buffer, not a parameter, so exporters and mergers that walk `named_parameters()` drop it;
    transformers then initialises it to zeros with only a load-time note, and every token is routed as if
    the load-balancing correction never happened: plausible text, quietly worse answers.

    Remedy: copy the bias tensors from the source checkpoint.
    """
    arch, _ = well_typed(ctx)
    if arch == V2:
        raise Skip("DeepSeek-V2 routing has no correction bias")
    names = set(ctx.weights.names)
    routers = sorted(int(m.group(1)) for name in names if (m := ROUTER.match(name)))
    for n in routers:                                  # the layers that store a router (CFG023: which should)
        name = f"model.layers.{n}.mlp.gate.e_score_correction_bias"
        if name not in names:
            yield Problem(f"layer {n} has no {name.split('.', 3)[-1]}: routed as if it were zero",
                          evidence={"tensor": name, "layer": n},
                          location=tensor(name))
            return
        bias = ctx.weights.get(name).float()
        if not torch.isfinite(bias).all():
            yield Problem(f"{name} holds non-finite values", evidence={"tensor": name},
                          location=tensor(name))
            return


def _ranges(layers: set[int]) -> str:
    """{1, 2, 3, 5} -> "1-3, 5"."""
    runs: list[list[int]] = []
    for i in sorted(layers):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"
