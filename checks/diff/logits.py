"""Diff section 4, logits on text: the statistics llama-perplexity prints in its KL-divergence mode, computed in
one run over both models (checks/diff/kld.py). With a baseline JSON as the candidate, what its top-k
log-probabilities allow (a lower bound of the KLD, top-1 agreement) on the baseline's own probes."""
from __future__ import annotations

import math

import torch

from checks.diff.kld import KLDAccumulator, chunks, first_scored, format_llama
from checks.diff.text import CORPUS
from checks.shared.prompts import DEFAULT_PROBES
from checks.catalogue.registry import Problem, Skip, check

DEFAULT_CTX = 512              # llama-perplexity's -c default
QUICK_CHUNKS = 2
KLD_WARN, KLD_ERROR = 0.01, 0.5


def corpus_text(ctx) -> str:
    return ctx.text if ctx.text else "\n".join(CORPUS + DEFAULT_PROBES)


def encode_prefix(tok, text: str, n_tokens: int | None, add_special_tokens: bool = False) -> list[int]:
    """The first n_tokens ids of `text` (all when None) without tokenizing a whole book: a prefix of the text
    is encoded, doubled until it yields n_tokens + a margin (the last ids of a cut prefix may split a word
    differently than the full text does, so the margin is dropped)."""
    if n_tokens is None:
        return tok.encode(text, add_special_tokens=add_special_tokens)
    chars = max(n_tokens * 8, 256)
    while True:
        ids = tok.encode(text[:chars], add_special_tokens=add_special_tokens)
        if chars >= len(text):
            return ids[:n_tokens]
        if len(ids) >= n_tokens + 16:
            return ids[:n_tokens]
        chars *= 2


def adds_bos(tok) -> int | None:
    """The BOS id when the tokenizer puts one in front of a plain encode (llama's add_bos), else None."""
    ids = tok.encode("a")
    return ids[0] if ids and tok.bos_token_id is not None and ids[0] == tok.bos_token_id else None


def scored_windows(ctx, ref_engine, cand_engine) -> tuple[list[list[int]], int]:
    tok = ctx.ref.tokenizer
    limit = min(ref_engine.config.max_position_embeddings, cand_engine.config.max_position_embeddings)
    n_ctx = min(ctx.ctx_len or DEFAULT_CTX, limit)
    max_chunks = ctx.max_chunks or (QUICK_CHUNKS if ctx.quick else None)
    tokens = encode_prefix(tok, corpus_text(ctx), n_ctx * max_chunks if max_chunks else None)
    if len(tokens) < n_ctx:      # the built-in corpus is short: one window of what there is
        n_ctx = len(tokens) - len(tokens) % 2
    if n_ctx < 4:
        raise Skip(f"the text is {len(tokens)} tokens, too short to score")
    vocab = cand_engine.config.vocab_size
    if max(tokens) >= vocab:
        raise Skip(f"the reference's token ids reach {max(tokens)}, past the candidate's vocabulary ({vocab})")
    windows = chunks(tokens, n_ctx, adds_bos(tok), max_chunks)
    return windows, n_ctx


def kld_run(ctx) -> dict:
    if "diff_kld" not in ctx.state:
        ref, cand = ctx.engines()
        windows, n_ctx = scored_windows(ctx, ref, cand)
        first, acc = first_scored(n_ctx), KLDAccumulator()
        for window in windows:
            a = ref.logits(window)[first:n_ctx - 1].cpu()        # [n_ctx - 1 - first, vocab]
            b = cand.logits(window)[first:n_ctx - 1].cpu()
            acc.add(a, b, window[first + 1:n_ctx])
        stats = acc.result()
        stats.update({"n_ctx": n_ctx, "chunks": len(windows),
                      "text": "--text" if ctx.text else "built-in corpus"})
        ctx.state["diff_kld"] = stats
    return ctx.state["diff_kld"]


def _clean(stats: dict) -> dict:
    return {k: (round(v, 9) if isinstance(v, float) and math.isfinite(v) else v) for k, v in stats.items()}


@check("DIF030", category="diff", severity="error", needs=("pair",),
       hint="Large KLD / low same-top-1: the candidate predicts differently; see DIF040 for where it starts.")
def logit_statistics(ctx):
    """PPL of both, ln(PPL ratio), mean KLD ± error with percentiles, Δp and same-top-1 (llama-perplexity's KL mode).

    The text (--text FILE, else a built-in corpus) is cut into llama-perplexity's windows (-c 512 unless the
    models are shorter, --ctx/--chunks), BOS first, only the second half of each window scored; the numbers
    are those `llama-perplexity --kl-divergence` prints, without a multi-GB logits file and without its
    uint16 rounding of the reference. Info below a mean KLD of 0.01 (kld_warn), warning above, error above
    0.5 (kld_error) or when a KLD is not finite."""
    if ctx.cand.kind == "baseline":
        yield from baseline_statistics(ctx)
        return
    s = kld_run(ctx)
    warn, error = ctx.threshold("DIF030", "kld_warn", KLD_WARN), ctx.threshold("DIF030", "kld_error", KLD_ERROR)
    kld = s["kld_mean"]
    severity = "error" if not math.isfinite(kld) or kld > error else "warning" if kld > warn else "info"
    yield Problem(f"mean KLD {kld:.6f} ± {s['kld_unc']:.6f}, same top-1 {100 * s['same_top']:.3f}%, PPL "
                  f"{s['ppl_ref']:.4f} -> {s['ppl_cand']:.4f} (ln ratio {s['ln_ppl_ratio']:+.6f}), RMS Δp "
                  f"{100 * s['dp_rms']:.3f}% over {s['positions']} positions ({s['chunks']} x {s['n_ctx']} tokens, "
                  f"{s['text']})", severity=severity,
                  evidence={**_clean(s), "llama_perplexity": format_llama(s).splitlines()})


def _partition_kl(ref_logprobs: torch.Tensor, row: dict) -> tuple[float, int]:
    """KL(ref || cand) over the partition {cand's top-k ids} + {everything else}: a lower bound of the full KL
    (grouping outcomes never increases a KL divergence). Also the candidate's top-1 id."""
    ids = row["ids"]
    q = torch.tensor([math.exp(v) if v is not None else 0.0 for v in row["logprobs"]], dtype=torch.float64)
    p = ref_logprobs[ids].exp()
    p_rest, q_rest = max(1.0 - float(p.sum()), 0.0), max(1.0 - float(q.sum()), 1e-12)
    keep = p > 0
    kl = float((p[keep] * (p[keep].log() - q[keep].clamp_min(1e-300).log())).sum())
    if p_rest > 0:
        kl += p_rest * (math.log(p_rest) - math.log(q_rest))
    return max(kl, 0.0), ids[0]


def baseline_statistics(ctx):
    doc = ctx.cand.baseline
    engine = ctx.ref.engine
    klds, same, total = [], 0, 0
    for probe in doc["probes"]:
        if max(probe["ids"], default=0) >= engine.config.vocab_size:
            continue
        logprobs = torch.log_softmax(engine.logits(probe["ids"]).double().cpu(), dim=-1)
        for lp, row in zip(logprobs, probe["top_k"]):
            kl, top = _partition_kl(lp, row)
            klds.append(kl)
            same += int(int(lp.argmax()) == top)
            total += 1
    if not total:
        raise Skip("no baseline probe fits the reference's vocabulary")
    mean = sum(klds) / total
    warn = ctx.threshold("DIF030", "kld_warn", KLD_WARN)
    yield Problem(f"against the baseline's top-{doc.get('top_k')} log-probabilities: KLD >= {mean:.6f} (lower "
                  f"bound), same top-1 {100 * same / total:.3f}% over {total} positions; PPL, Δp and percentiles "
                  "need full distributions on text and are not computable from a baseline file",
                  severity="warning" if mean > warn else "info",
                  evidence={"kld_mean_lower_bound": mean, "kld_max_lower_bound": max(klds),
                            "same_top": same / total, "positions": total, "top_k": doc.get("top_k"),
                            "not_computed": ["ppl", "ln_ppl_ratio", "dp", "kld percentiles on text"]})
