"""Mixture-of-experts checks (MOE): the expert configuration agrees with the tensors, no expert's weights are
out of scale with its siblings, and on the probe prompts the router is finite and informative, every expert
gets tokens and no expert takes most of them. Dense models skip these checks."""
from __future__ import annotations

import re

import torch

from checks.catalogue.registry import Problem, Skip, check
from checks.runtime.routing import routing

EXPERT = re.compile(r"\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
ROUTER = re.compile(r"\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.gate\.weight$")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def declared_experts(raw: dict) -> int | None:
    return next((raw[k] for k in EXPERT_KEYS if isinstance(raw.get(k), int)), None)


def require_moe(ctx) -> tuple[int | None, dict]:
    raw = ctx.config.raw
    if not declared_experts(raw) and not any(ROUTER.search(n) for n in ctx.weights.names):
        # a dense model, also one that declares 0 experts (Granite 4 dense: num_local_experts 0 beside
        # transformers' default num_experts_per_tok 2)
        raise Skip("not a mixture-of-experts model")
    return declared_experts(raw), raw


@check("MOE001", category="config", severity="error", needs=("config", "weights"),
       hint="Make num_experts / num_experts_per_tok in config.json match the stored experts and router.")
def expert_config(ctx):
    """The expert count, top-k and the stored experts and routers agree.

    A MoE config names how many experts each layer has (`num_experts` / `num_local_experts`) and how many a
    token is routed to (`num_experts_per_tok`). A top-k of 0 or above the expert count makes transformers'
    torch.topk fail ("selected index k out of range"); a count that disagrees with the stored experts (a
    pruned or merged checkpoint whose config was not updated) leaves experts missing or ignored, and a router
    with another number of rows routes to experts that do not exist.

    Remedy: set the numbers from the checkpoint: router rows = stored experts per layer = num_experts.
    """
    experts, raw = require_moe(ctx)
    top_k = raw.get("num_experts_per_tok")
    ev = {"num_experts": experts, "num_experts_per_tok": top_k}
    if experts is None:
        yield Problem("router tensors present but config.json declares no expert count", evidence=ev)
        return
    if not isinstance(top_k, int) or not 1 <= top_k <= experts:
        yield Problem(f"num_experts_per_tok {top_k!r} is not between 1 and the {experts} experts", evidence=ev)
    stored: dict[int, set[int]] = {}
    for name in ctx.weights.names:
        m = EXPERT.search(name)
        if m:
            stored.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    for layer, ids in sorted(stored.items()):
        if len(ids) != experts or max(ids) != experts - 1:
            yield Problem(f"layer {layer} stores {len(ids)} experts (ids {min(ids)}..{max(ids)}), config "
                          f"declares {experts}", evidence={**ev, "layer": layer, "stored": len(ids)})
            break
    for name in ctx.weights.names:
        if ROUTER.search(name) and ctx.weights.info(name).shape[0] != experts:
            yield Problem(f"router {name} has {ctx.weights.info(name).shape[0]} rows, config declares {experts} "
                          f"experts", evidence={**ev, "tensor": name})
            break


@check("MOE002", category="weights", severity="warning", needs=("config", "weights"),
       hint="Re-export the expert from the source checkpoint; compare its scale with its siblings'.")
def expert_scale(ctx):
    """No expert's weights are far out of scale with the other experts of its layer (threshold `ratio`, 10x).

    Experts of one layer are trained side by side from one initialisation; their weight norms stay within a
    small factor of each other. One expert 100x larger (a merge that added a delta to one expert twice, an
    expert dequantized with the wrong scale, an expert copied from another checkpoint) dominates every token
    routed to it. Compares each expert's RMS over its projections with the median of its layer.

    Remedy: restore the expert's tensors from the source checkpoint.
    """
    require_moe(ctx)
    ratio = ctx.threshold("MOE002", "ratio", 10.0)
    rms: dict[int, dict[int, list[float]]] = {}
    for name in ctx.weights.names:
        m = EXPERT.search(name)
        if m:
            t = ctx.weights.get(name).float()
            rms.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), []).append(float(t.pow(2).mean().sqrt()))
    for layer, per_expert in sorted(rms.items()):
        scale = {e: sum(v) / len(v) for e, v in per_expert.items()}
        median = sorted(scale.values())[len(scale) // 2]
        for e, s in sorted(scale.items()):
            if median > 0 and (s > ratio * median or s < median / ratio):
                yield Problem(f"layer {layer} expert {e}: weight RMS {s:.3g} is {s / median:.3g}x the layer's "
                              f"median expert ({median:.3g})", evidence={"layer": layer, "expert": e,
                                                                        "rms": s, "median": median})


def _moe_routing(ctx):
    r = routing(ctx)
    if not r.layers:
        raise Skip("not a mixture-of-experts model")
    return r


@check("MOE003", category="activations", severity="error", needs=("engine", "tokenizer"),
       hint="Restore the router (gate) tensors from the source checkpoint.")
def router_health(ctx):
    """The router logits are finite and differ between experts on the probe prompts.

    NaN/Inf router logits turn the softmax into NaN and the top-k into an arbitrary pick; router logits that
    are identical across experts for every token (a zeroed or constant gate matrix, a router lost in
    conversion and left at its initial zeros) carry no routing signal: every token goes to the same experts,
    whatever it is. Both come from broken gate tensors, not from training.

    Remedy: re-export the `gate` (router) tensors; they are small, compare them with the source.
    """
    for layer, s in sorted(_moe_routing(ctx).layers.items()):
        ev = {"layer": layer, "tokens": s.tokens, "nonfinite_tokens": s.nonfinite, "max_spread": s.max_spread}
        if s.nonfinite:
            yield Problem(f"layer {layer}: router logits non-finite for {s.nonfinite} of {s.tokens} probe tokens",
                          evidence=ev)
        elif s.max_spread < 1e-6:
            yield Problem(f"layer {layer}: router logits identical across experts for every probe token (a "
                          f"zeroed or constant router)", evidence=ev)


@check("MOE004", category="activations", severity="warning", needs=("engine", "tokenizer"),
       hint="Check the router of the named layer; a dead expert is dead weight (or a broken router row).")
def dead_experts(ctx):
    """Every expert of every MoE layer is chosen by some probe token (with enough tokens to tell), and by the
    token: its router logit moves with the token as its siblings' do.

    An expert no token is routed to contributes nothing: after training this is the "dead expert" failure
    (routing collapse), after a conversion it is usually a router row that was zeroed, negated or mixed up
    with another. Judged only where the probes route at least `min_slots_per_expert` (8) slots per expert,
    so a small probe set on a 128-expert model does not cry wolf (then it is info).

    A zeroed router row is dead whatever the counts say: its logit is 0 for every token, so the expert still
    wins whenever its siblings' logits happen to fall below 0 (on an untrained or small router, often), but
    never because of what the token is. Any expert whose logit moves over the probe tokens less than 1/1000
    of its siblings' median movement is reported, however many slots the probes route.

    Remedy: compare the layer's router rows with the source checkpoint.
    """
    per = ctx.threshold("MOE004", "min_slots_per_expert", 8)
    for layer, s in sorted(_moe_routing(ctx).layers.items()):
        flat = s.flat
        if flat:
            spread = s.expert_spread
            yield Problem(f"layer {layer}: the router gives expert {flat[0]} the same logit "
                          f"({float(s.low[flat[0]]):.3g}) for every probe token ({len(flat)} such of {s.experts} "
                          "experts): a zeroed or lost router row", severity="warning",
                          evidence={"layer": layer, "flat": flat[:32], "logit_spread": float(spread[flat[0]]),
                                    "median_spread": float(spread.median()), "counts": s.counts.tolist()[:128]})
        dead = [e for e in s.dead if e not in flat]
        if not dead:
            continue
        enough = s.slots >= per * s.experts
        yield Problem(f"layer {layer}: {len(dead)} of {s.experts} experts chosen by no probe token "
                      f"(e.g. expert {dead[0]}) over {s.slots} routed slots",
                      severity="warning" if enough else "info",
                      evidence={"layer": layer, "dead": dead[:32], "slots": s.slots,
                                "counts": s.counts.tolist()[:128]})


@check("MOE005", category="activations", severity="warning", needs=("engine", "tokenizer"),
       hint="Check the router of the named layer; one expert taking most tokens defeats the mixture.")
def routing_imbalance(ctx):
    """No expert is chosen by far more probe tokens than uniform routing gives it: its share of the tokens
    above `factor` (4) x top_k / experts, capped at 90% (for few experts), with at least 4 slots per expert.

    A trained router spreads tokens (load-balancing loss); one expert receiving (nearly) every token means
    the router lost its signal (a zeroed, constant or heavily biased gate) and the model runs as a small
    dense model with the other experts dead weight.

    Remedy: compare the layer's router with the source checkpoint.
    """
    factor = ctx.threshold("MOE005", "factor", 4.0)
    for layer, s in sorted(_moe_routing(ctx).layers.items()):
        uniform = s.top_k / s.experts                     # share of the tokens each expert gets when uniform
        share = float(s.counts.max()) / max(s.tokens - s.nonfinite, 1)
        limit = min(factor * uniform, 0.9)
        if s.experts > s.top_k and share > limit and s.slots >= 4 * s.experts:
            busiest = int(s.counts.argmax())
            yield Problem(f"layer {layer}: expert {busiest} was chosen by {share:.0%} of the probe tokens "
                          f"(uniform routing: {uniform:.0%})",
                          evidence={"layer": layer, "expert": busiest, "share": share, "limit": limit,
                                    "counts": s.counts.tolist()[:128]})


@check("MOE006", category="activations", severity="warning", needs=("engine", "tokenizer"),
       hint="Compare the layer's router and e_score_correction_bias with the source checkpoint; check n_group.")
def dead_groups(ctx):
    """Group-limited routing (DeepSeek-V2/V3, Kimi K2, GLM-4.5: `n_group` > 1) sends some probe token to every
    expert group (with enough tokens to tell: `min_tokens_per_group`, 8, expected per group).

    These routers first keep each token's `topk_group` best groups and only then pick experts inside them. A
    group that no token keeps is a failure of its own, beyond single dead experts: a whole slice of the
    experts (often one device's worth under expert parallelism) runs no token. After conversion the usual
    cause is e_score_correction_bias (a sign or scale slip, a bias from another checkpoint: sigmoid scores live
    in (0, 1), so a bias of -1 shuts a group out), or `n_group`/`topk_group` that disagree with the training
    setup. Per-expert deadness is MOE004; this names the group, its experts and its bias.

    Remedy: restore `mlp.gate.weight` and `mlp.gate.e_score_correction_bias` of the layer from the source;
    check n_group and topk_group against the model card.
    """
    per = ctx.threshold("MOE006", "min_tokens_per_group", 8)
    ran = False
    for layer, s in sorted(_moe_routing(ctx).layers.items()):
        if s.groups < 2:
            continue
        ran = True
        size = s.experts // s.groups
        expected = (s.tokens - s.nonfinite) * s.group_topk / s.groups
        for g in s.dead_groups:
            experts = list(range(g * size, (g + 1) * size))
            ev = {"layer": layer, "group": g, "experts": experts, "n_group": s.groups, "topk_group": s.group_topk,
                  "tokens": s.tokens, "group_counts": s.group_counts.tolist()}
            why = ""
            if s.bias is not None:
                mine = float(s.bias[experts].mean())
                others = float(torch.cat([s.bias[: g * size], s.bias[(g + 1) * size:]]).mean())
                ev.update(group_bias=mine, other_groups_bias=others)
                why = f"; its e_score_correction_bias averages {mine:.3g} (other groups {others:.3g})"
            yield Problem(f"layer {layer}: expert group {g} (experts {experts[0]}..{experts[-1]}) kept by no probe "
                          f"token over {s.tokens} tokens (topk_group {s.group_topk} of {s.groups} groups){why}",
                          severity="warning" if expected >= per else "info", evidence=ev)
    if not ran:
        raise Skip("the router is not group-limited (n_group 1)")
