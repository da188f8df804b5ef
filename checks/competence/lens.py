"""Where it breaks, without a reference: a logit lens. Each layer's residual stream is read
through the model's own final norm and head, on the start of the built-in text and on the copy prompt, and the
layer after which the reading never recovers is named.

One prefill of each prompt keeps every layer's output (the capture hook, so it works on every input the engine
runs: quantized, GGUF, adapted, streamed); the model's final norm and head (read from its tensor table,
dequantized where stored quantized) then read each of them. It runs only when a competence check fails.

Healthy models draw a curve that reads sense only at the end: SmolLM2-135M's lens loss stays at 20-27 nats
(above ln V) through layer 22, then falls to 3.9 at layer 29, and its copy ratio falls under 0.6 from layer 23
(docs/competence.md). A layer "reads" when its lens loss meets the text bound or its copy ratio the copy
bound. When some layer reads and the output does not, the first failing layer is the one after the last layer
that reads; when no layer reads at all (a packing mix-up in every projection, norms lost everywhere), the
fault is at or before the layers where a lens can read, and the first layer is named. The lens cannot place
a fault more finely than the depth at which healthy models of that size start to read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from checks.shared.weights.tensor_layout import EMBED, LM_HEAD
from probes.competence import MAX_COPY_RATIO, copy_score, mean_loss, token_logprobs
from reference_engine.core import families
from reference_engine.core.model import final_logits, norm

LENS_TEXT_TOKENS = 64     # the text's first tokens: enough for a curve, cheap enough for L prefills


class Keep:
    """Capture hook: every layer's output (module 'hidden'), by layer."""

    def __init__(self):
        self.hidden: dict[int, torch.Tensor] = {}

    def __call__(self, layer: int, module: str, x):
        if module == "hidden":
            self.hidden[layer] = x.detach().float().cpu()       # [tokens, hidden]
        return None


@dataclass
class LensPoint:
    layer: int
    text_loss: float
    copy_ratio: float | None

    def as_dict(self) -> dict:
        return {"layer": self.layer, "text_loss": round(self.text_loss, 3),
                "copy_ratio": None if self.copy_ratio is None else round(self.copy_ratio, 3)}


def head_of(weights, config) -> tuple[torch.Tensor, torch.Tensor]:
    """(final norm weight [hidden], head [vocab, hidden]) in float32, from the tensor table."""
    head = EMBED if config.tie_word_embeddings or LM_HEAD not in weights.names else LM_HEAD
    return weights.get(families.settings(config).final_norm).float(), weights.get(head).float()


def read_layers(kept: Keep, norm_w: torch.Tensor, head: torch.Tensor, config, ids) -> dict[int, list[float]]:
    """layer -> next-token log-probs of ids, read from that layer's output through the final norm and head."""
    out = {}
    for layer, h in sorted(kept.hidden.items()):
        logits = final_logits(norm(h, norm_w, config) @ head.T, config)       # [tokens, vocab]
        out[layer] = token_logprobs(logits, ids)
    return out


def lens_curve(engine, weights, text_ids, copy=None) -> list[LensPoint]:
    """LensPoint of every layer: one prefill of the text's first LENS_TEXT_TOKENS tokens and one of the copy
    prompt (a streaming engine: one pass), every layer kept, then read through the final norm and head."""
    config = engine.config
    text_ids = list(text_ids[:LENS_TEXT_TOKENS + 1])
    seqs = [text_ids] + ([list(copy.ids)] if copy is not None else [])
    kept = [Keep() for _ in seqs]
    engine.logits_many(seqs, captures=kept)
    norm_w, head = head_of(weights, config)
    text = read_layers(kept[0], norm_w, head, config, text_ids)
    copied = read_layers(kept[1], norm_w, head, config, copy.ids) if copy is not None else {}
    out = []
    for layer, lp in text.items():
        ratio = copy_score(copied[layer], copy.start, copy.length).ratio if layer in copied else None
        out.append(LensPoint(layer, mean_loss(lp), ratio))
    return out


def first_failing(curve: list[LensPoint], text_bound: float) -> int | None:
    """The first layer after which the lens no longer reads (see the module doc); None when the last layer
    reads (the failure is not in the residual stream's reading: e.g. only copying fails)."""
    reads = [(math.isfinite(p.text_loss) and p.text_loss < text_bound)
             or (p.copy_ratio is not None and math.isfinite(p.copy_ratio) and p.copy_ratio < MAX_COPY_RATIO)
             for p in curve]
    if not reads or reads[-1]:
        return None
    last = max((k for k, ok in enumerate(reads) if ok), default=-1)
    return curve[last + 1].layer
