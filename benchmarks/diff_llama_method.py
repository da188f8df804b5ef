"""How close `llmdoctor diff`'s DIF030 numbers are to what llama-perplexity's own method gives on the same
logits: llama-perplexity stores the reference's log-probabilities as uint16 over a 16-nat window (per row:
scale, min_log_prob, then round((logit - min_logit) / scale)) and sums the KLD only over tokens whose decoded
base log-prob is above -16. This script runs both models once per window and feeds the same logits to
(a) checks/diff/kld.py (exact, float64) and (b) a line-by-line port of perplexity.cpp's
log_softmax(...uint16...) writer and kl_divergence reader. llama-perplexity itself needs a llama.cpp build,
which this environment does not have.

    python3 benchmarks/diff_llama_method.py CAND.gguf [--chunks 2] [--ctx 512]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from checks.diff.kld import KLDAccumulator, chunks, first_scored  # noqa: E402
from reference_engine.engine import Engine  # noqa: E402
from tests import assets  # noqa: E402


def encode_base(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """perplexity.cpp log_softmax(n_vocab, logits, uint16 *log_prob, tok), per row: (scale, min_log_prob, q)."""
    x = logits.float()
    max_logit = x.max(-1).values
    min_logit = torch.maximum(x.min(-1).values, max_logit - 16)
    lse = torch.log(torch.exp(x - max_logit[:, None]).double().sum(-1)).float()
    min_log_prob = min_logit - max_logit - lse
    scale = (max_logit - min_logit) / 65535.0
    q = torch.where(x > min_logit[:, None], torch.round((x - min_logit[:, None]) / scale[:, None]), torch.zeros_like(x))
    return scale, min_log_prob, q


def llama_accumulate(sums: dict, base: tuple, cand_logits: torch.Tensor, targets: list[int]) -> None:
    """perplexity.cpp's kl_divergence log_softmax(...) reading the uint16 base, accumulated into `sums`."""
    scale, min_log_prob, q = base
    x = cand_logits.float()
    max_logit = x.max(-1).values
    lse = torch.log(torch.exp(x - max_logit[:, None]).double().sum(-1)).float()
    t = torch.tensor(targets)
    rows = torch.arange(len(targets))
    nll = (max_logit + lse - x[rows, t]).double()
    p_log_base = scale[:, None] * q + min_log_prob[:, None]              # float32 as in C
    nll_base = -(p_log_base[rows, t]).double()
    keep = p_log_base > -16
    terms = torch.where(keep, torch.exp(p_log_base) * (p_log_base - x + (max_logit + lse)[:, None]),
                        torch.zeros_like(x))
    kld = terms.double().sum(-1)
    same = (x.argmax(-1) == p_log_base.argmax(-1))
    dp = torch.exp(-nll) - torch.exp(-nll_base)
    for key, value in (("nll", nll), ("nll2", nll * nll), ("nb", nll_base), ("nb2", nll_base * nll_base),
                       ("nnb", nll * nll_base), ("kld", kld), ("kld2", kld * kld), ("dp2", dp * dp)):
        sums[key] = sums.get(key, 0.0) + float(value.sum())
    sums["same"] = sums.get("same", 0) + int(same.sum())
    sums["n"] = sums.get("n", 0) + len(targets)


def llama_summary(s: dict) -> dict:
    n = s["n"]

    def mu(a, b):
        m = a / n
        v = b / n - m * m
        return m, (math.sqrt(v / (n - 1)) if v > 0 and n > 10 else 0.0)
    lp, _ = mu(s["nll"], s["nll2"])
    lb, _ = mu(s["nb"], s["nb2"])
    kld, kld_unc = mu(s["kld"], s["kld2"])
    return {"ppl_cand": math.exp(lp), "ppl_ref": math.exp(lb), "ln_ppl_ratio": lp - lb, "kld_mean": kld,
            "kld_unc": kld_unc, "same_top": s["same"] / n, "dp_rms": math.sqrt(s["dp2"] / n)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cand", type=Path)
    ap.add_argument("--chunks", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=512)
    args = ap.parse_args()
    ref_dir = assets.smollm2_dir()
    ref = Engine.from_pretrained(ref_dir)
    cand = Engine.from_pretrained(args.cand)
    tok = ref.tokenizer
    tokens = tok.encode(assets.botchan_text()[: args.ctx * args.chunks * 8], add_special_tokens=False)
    bos = tok.encode("a")[0] if tok.bos_token_id is not None and tok.encode("a")[0] == tok.bos_token_id else None
    first = first_scored(args.ctx)
    exact, sums = KLDAccumulator(), {}
    for window in chunks(tokens, args.ctx, bos, args.chunks):
        a = ref.logits(window)[first:args.ctx - 1].cpu()
        b = cand.logits(window)[first:args.ctx - 1].cpu()
        targets = window[first + 1:]
        exact.add(a, b, targets)
        llama_accumulate(sums, encode_base(a), b, targets)
    ours, theirs = exact.result(), llama_summary(sums)
    print(f"candidate {args.cand.name}, {ours['positions']} positions ({args.chunks} x {args.ctx})")
    print("| statistic | llmdoctor (exact) | llama-perplexity method (uint16 base) | difference |")
    print("|---|--:|--:|--:|")
    for key in ("kld_mean", "same_top", "ppl_ref", "ppl_cand", "ln_ppl_ratio", "dp_rms"):
        print(f"| {key} | {ours[key]:.6f} | {theirs[key]:.6f} | {ours[key] - theirs[key]:+.2e} |")


if __name__ == "__main__":
    main()
