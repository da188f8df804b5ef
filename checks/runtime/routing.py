"""Mixture-of-experts routing on the probe prompts: per MoE layer, how many routed slots each expert got, and
whether the router logits were finite and spread. Built from the engine's "router" capture point (the router
logits of every token, before softmax/sigmoid/top-k), routed by the engine's own router (core/moe.route: the
family's method, groups and e_score_correction_bias), so the counts are exactly the engine's routing decisions.
Group-limited routers (DeepSeek, GLM-4.5) also count the tokens each expert group served. Cached in
ctx.state; shared by the MOE checks."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from checks.shared.prompts import probe_inputs
from reference_engine.core.moe import route

COLLAPSED_SPREAD = 1e-6     # router logits this close across experts for every token: no routing signal
FLAT_RATIO = 1e-3           # an expert's logit varying this much less over the tokens than its siblings': flat


@dataclass
class LayerRouting:
    layer: int
    experts: int
    top_k: int
    counts: torch.Tensor = None        # [experts] int64: routed slots per expert
    tokens: int = 0
    nonfinite: int = 0                 # tokens whose router logits hold NaN/Inf
    max_spread: float = 0.0            # largest (max - min) of one token's router logits
    low: torch.Tensor = None           # [experts] float32: lowest finite router logit of each expert
    high: torch.Tensor = None          # [experts] float32: highest
    groups: int = 1                    # n_group of a group-limited router (1: none)
    group_topk: int = 1                # topk_group: groups each token keeps
    group_counts: torch.Tensor = None  # [groups] int64: tokens that used each group
    bias: torch.Tensor | None = None   # [experts] e_score_correction_bias (noaux_tc), as stored

    @property
    def expert_spread(self) -> torch.Tensor:
        """[experts]: how far each expert's router logit moves over the probe tokens."""
        return (self.high - self.low).clamp(min=0)

    @property
    def flat(self) -> list[int]:
        """Experts whose router logit is (nearly) the same for every token while their siblings' move: a zeroed
        router row gives logit 0 whatever the token, so the expert is picked by where the others happen to fall,
        never by what the token is."""
        spread = self.expert_spread
        median = float(spread.median())
        if self.low is None or median <= COLLAPSED_SPREAD:   # the whole router is flat: MOE003/MOE005's case
            return []
        return [e for e in range(self.experts) if float(spread[e]) <= FLAT_RATIO * median]

    @property
    def dead_groups(self) -> list[int]:
        if self.groups < 2 or self.group_counts is None:
            return []
        return [g for g in range(self.groups) if int(self.group_counts[g]) == 0]

    @property
    def slots(self) -> int:
        return int(self.counts.sum())

    @property
    def dead(self) -> list[int]:
        return [e for e in range(self.experts) if int(self.counts[e]) == 0]


@dataclass
class Routing:
    layers: dict[int, LayerRouting] = field(default_factory=dict)


def moe_settings(engine):
    from reference_engine.core.families import settings
    return settings(engine.config).moe


def router_bias(ctx, layer: int) -> torch.Tensor | None:
    """The layer's e_score_correction_bias as stored (the family's plan names it), or None."""
    from reference_engine.core.families import layer_plan
    slot = layer_plan(ctx.engine.config, layer).get("e_score_correction_bias")
    if not slot:
        return None
    try:
        return ctx.weights.get(slot[0][0]).float()
    except (KeyError, AttributeError, OSError):      # no file table at hand: route as if unbiased
        return None


def new_layer(ctx, layer: int, moe) -> LayerRouting:
    n = moe.num_experts
    return LayerRouting(layer, n, moe.top_k, torch.zeros(n, dtype=torch.int64), low=torch.full((n,), float("inf")),
                        high=torch.full((n,), float("-inf")), groups=moe.n_group, group_topk=moe.topk_group,
                        group_counts=torch.zeros(moe.n_group, dtype=torch.int64), bias=router_bias(ctx, layer))


def routing(ctx) -> Routing:
    """Routing statistics of the probe prompts (empty for a dense model)."""
    if "routing" in ctx.state:
        return ctx.state["routing"]
    engine, moe, out = ctx.engine, moe_settings(ctx.engine), Routing()
    if moe is not None:
        def capture(layer: int, module: str, logits: torch.Tensor):
            if module != "router":
                return None
            if layer not in out.layers:
                out.layers[layer] = new_layer(ctx, layer, moe)
            stats = out.layers[layer]
            logits = logits.float().cpu()
            finite = torch.isfinite(logits).all(dim=-1)
            stats.tokens += logits.shape[0]
            stats.nonfinite += int((~finite).sum())
            if finite.any():
                good = logits[finite]
                stats.max_spread = max(stats.max_spread, float((good.max(-1).values - good.min(-1).values).max()))
                stats.low = torch.minimum(stats.low, good.min(0).values)
                stats.high = torch.maximum(stats.high, good.max(0).values)
                ids = route(good, moe, stats.bias)[1]                               # [tokens, top_k]
                stats.counts += torch.bincount(ids.flatten(), minlength=moe.num_experts)
                used = torch.zeros(len(ids), moe.n_group, dtype=torch.bool)
                used.scatter_(1, ids // (moe.num_experts // moe.n_group), True)     # [tokens, groups]
                stats.group_counts += used.sum(0)
            return None
        for probe in probe_inputs(ctx):
            engine.logits(list(probe.ids), capture=capture)
    ctx.state["routing"] = out
    return out
