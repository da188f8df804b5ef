"""The statistics `llama-perplexity --kl-divergence` prints, computed the same way so numbers are comparable,
but in one run over two models (no base-logits file, no uint16 rounding of the reference log-probabilities).

Per scored position (reference = "base", candidate = "Q" in llama.cpp's words):
  nll = -log q(next), nll_base = -log p(next), KLD = sum_v p_v (log p_v - log q_v),
  dp = q(next) - p(next), same top = argmax p == argmax q.
Means carry llama.cpp's uncertainty (`mean_and_uncertainty`: sqrt(var / (n-1)), 0 below 11 samples),
percentiles its linear interpolation, ln(PPL ratio) its covariance-corrected error.
Chunking (`chunks`) is llama-perplexity's: non-overlapping windows of n_ctx tokens, the first replaced by BOS
when the tokenizer adds one, only the second half of each window scored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

KLD_PERCENTILES = (99.9, 99.0, 95.0, 90.0, 10.0, 5.0, 1.0, 0.1)
DP_PERCENTILES = (99.9, 99.0, 95.0, 90.0, 75.0, 25.0, 10.0, 5.0, 1.0, 0.1)


def chunks(tokens: list[int], n_ctx: int, bos_id: int | None, max_chunks: int | None = None) -> list[list[int]]:
    """llama-perplexity's windows: len(tokens) // n_ctx of them (at most max_chunks), BOS as first token."""
    n = len(tokens) // n_ctx
    if max_chunks:
        n = min(n, max_chunks)
    out = []
    for i in range(n):
        window = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if bos_id is not None:
            window[0] = bos_id
        out.append(window)
    return out


def first_scored(n_ctx: int) -> int:
    """Positions first..n_ctx-2 are scored (each predicts the next token): the second half of the window."""
    return n_ctx // 2


@dataclass
class KLDAccumulator:
    """Running sums as llama.cpp's kl_divergence_result, plus the per-position values for percentiles."""
    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_dp: float = 0.0
    sum_dp2: float = 0.0
    sum_dp4: float = 0.0
    same_top: int = 0
    count: int = 0
    kld_values: list[float] = field(default_factory=list)
    dp_values: list[float] = field(default_factory=list)

    def add(self, ref_logits: torch.Tensor, cand_logits: torch.Tensor, targets: list[int]) -> None:
        """ref_logits, cand_logits [n, vocab] (rows predict targets[i]); vocabularies may differ in size:
        the candidate is compared on the reference's ids (missing ids count as probability 0)."""
        p_log = torch.log_softmax(ref_logits.double(), dim=-1)            # [n, V_ref]
        q_log = torch.log_softmax(cand_logits.double(), dim=-1)           # [n, V_cand]
        q_log = _fit(q_log, p_log.shape[-1])
        target = torch.tensor(targets, dtype=torch.long).unsqueeze(-1)   # [n, 1]
        nll = -q_log.gather(-1, target).squeeze(-1)
        nll_base = -p_log.gather(-1, target).squeeze(-1)
        p = p_log.exp()
        # 0 * log 0 = 0; where p > 0 but q = 0 the KLD is infinite, as it should be
        terms = torch.where(p > 0, p * (p_log - q_log), torch.zeros_like(p))
        kld = terms.sum(-1)
        dp = nll.neg().exp() - nll_base.neg().exp()
        same = p_log.argmax(-1) == q_log.argmax(-1)
        self.sum_nll += float(nll.sum())
        self.sum_nll2 += float((nll * nll).sum())
        self.sum_nll_base += float(nll_base.sum())
        self.sum_nll_base2 += float((nll_base * nll_base).sum())
        self.sum_nll_nll_base += float((nll * nll_base).sum())
        self.sum_kld += float(kld.sum())
        self.sum_kld2 += float((kld * kld).sum())
        self.sum_dp += float(dp.sum())
        self.sum_dp2 += float((dp * dp).sum())
        self.sum_dp4 += float((dp ** 4).sum())
        self.same_top += int(same.sum())
        self.count += len(targets)
        self.kld_values += kld.tolist()
        self.dp_values += dp.tolist()

    def result(self) -> dict:
        return kld_statistics(self)


def _fit(logprobs: torch.Tensor, vocab: int) -> torch.Tensor:
    """Candidate log-probs cut or padded (-inf) to the reference's vocabulary size."""
    have = logprobs.shape[-1]
    if have >= vocab:
        return logprobs[..., :vocab]
    pad = torch.full((*logprobs.shape[:-1], vocab - have), float("-inf"), dtype=logprobs.dtype)
    return torch.cat([logprobs, pad], dim=-1)


def mean_and_uncertainty(total: float, total2: float, count: int) -> tuple[float, float]:
    """llama.cpp's mean and standard error (0 when there are 10 samples or fewer)."""
    if count < 1:
        return 0.0, 0.0
    mean = total / count
    var = total2 / count - mean * mean
    return mean, (math.sqrt(var / (count - 1)) if var > 0 and count > 10 else 0.0)


def covariance(sum_a: float, sum_b: float, sum_ab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (sum_ab / count - (sum_a / count) * (sum_b / count)) / (count - 1)


def percentile(values: list[float], fraction: float) -> float:
    """llama.cpp's percentile of sorted values: linear interpolation at fraction * (n - 1)."""
    if fraction <= 0:
        return values[0]
    if fraction >= 1:
        return values[-1]
    p = fraction * (len(values) - 1)
    i = int(p)
    p -= i
    return (1 - p) * values[i] + p * values[min(i + 1, len(values) - 1)]


def median(values: list[float]) -> float:
    n = len(values)
    return 0.5 * (values[n // 2] + values[n // 2 - 1]) if n % 2 == 0 else values[n // 2]


def kld_statistics(acc: KLDAccumulator) -> dict:
    """Every number of llama-perplexity's three summary blocks (see format_llama), as a flat dict."""
    n = acc.count
    if n == 0:
        raise ValueError("no position was scored")
    log_ppl, log_ppl_unc = mean_and_uncertainty(acc.sum_nll, acc.sum_nll2, n)
    log_base, log_base_unc = mean_and_uncertainty(acc.sum_nll_base, acc.sum_nll_base2, n)
    cov = covariance(acc.sum_nll, acc.sum_nll_base, acc.sum_nll_nll_base, n)
    ppl, ppl_base = math.exp(log_ppl), math.exp(log_base)
    spread = log_ppl_unc ** 2 + log_base_unc ** 2
    # identical runs make the difference pure rounding (~1e-18 of ~1e-3): that is an exact 0, not a 2.6e-9 spread
    ratio_var = spread - 2 * cov
    ratio_unc = math.sqrt(ratio_var) if ratio_var > 1e-12 * spread else 0.0
    denominator = log_ppl_unc * log_base_unc
    kld_mean, kld_unc = mean_and_uncertainty(acc.sum_kld, acc.sum_kld2, n)
    dp_mean, dp_unc = mean_and_uncertainty(acc.sum_dp, acc.sum_dp2, n)
    mse, mse_unc = mean_and_uncertainty(acc.sum_dp2, acc.sum_dp4, n)
    rms = math.sqrt(mse)
    same = acc.same_top / n
    klds, dps = sorted(acc.kld_values), sorted(acc.dp_values)
    ppl_unc, ppl_base_unc = ppl * log_ppl_unc, ppl_base * log_base_unc
    out = {
        "positions": n,
        "ppl_cand": ppl, "ppl_cand_unc": ppl_unc, "ppl_ref": ppl_base, "ppl_ref_unc": ppl_base_unc,
        "cor_ln_ppl": cov / denominator if denominator > 0 else (1.0 if log_ppl == log_base else 0.0),
        "ln_ppl_ratio": log_ppl - log_base, "ln_ppl_ratio_unc": ratio_unc,
        "ppl_ratio": math.exp(log_ppl - log_base), "ppl_ratio_unc": math.exp(log_ppl - log_base) * ratio_unc,
        "ppl_diff": ppl - ppl_base,
        "ppl_diff_unc": math.sqrt(max(ppl_unc ** 2 + ppl_base_unc ** 2 - 2 * ppl * ppl_base * cov, 0.0)),
        "kld_mean": kld_mean, "kld_unc": kld_unc, "kld_max": klds[-1], "kld_median": median(klds),
        "kld_min": klds[0],
        "dp_mean": dp_mean, "dp_unc": dp_unc, "dp_max": dps[-1], "dp_median": median(dps), "dp_min": dps[0],
        "dp_rms": rms, "dp_rms_unc": 0.5 / rms * mse_unc if rms > 0 else 0.0,
        "same_top": same, "same_top_unc": math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else 0.0,
    }
    for q in KLD_PERCENTILES:
        out[f"kld_p{q:g}"] = percentile(klds, q / 100)
    for q in DP_PERCENTILES:
        out[f"dp_p{q:g}"] = percentile(dps, q / 100)
    return out


def format_llama(s: dict) -> str:
    """The three blocks as llama-perplexity prints them (same labels, same number formats)."""
    lines = ["====== Perplexity statistics ======",
             f"Mean PPL(Q)                   : {s['ppl_cand']:10.6f} ± {s['ppl_cand_unc']:10.6f}",
             f"Mean PPL(base)                : {s['ppl_ref']:10.6f} ± {s['ppl_ref_unc']:10.6f}",
             f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * s['cor_ln_ppl']:6.2f}%",
             f"Mean ln(PPL(Q)/PPL(base))     : {s['ln_ppl_ratio']:10.6f} ± {s['ln_ppl_ratio_unc']:10.6f}",
             f"Mean PPL(Q)/PPL(base)         : {s['ppl_ratio']:10.6f} ± {s['ppl_ratio_unc']:10.6f}",
             f"Mean PPL(Q)-PPL(base)         : {s['ppl_diff']:10.6f} ± {s['ppl_diff_unc']:10.6f}",
             "", "====== KL divergence statistics ======",
             f"Mean    KLD: {s['kld_mean']:10.6f} ± {s['kld_unc']:10.6f}",
             f"Maximum KLD: {s['kld_max']:10.6f}"]
    lines += [f"{_label(q)}   KLD: {s[f'kld_p{q:g}']:10.6f}" for q in KLD_PERCENTILES if q > 50]
    lines.append(f"Median  KLD: {s['kld_median']:10.6f}")
    lines += [f"{_label(q)}   KLD: {s[f'kld_p{q:g}']:10.6f}" for q in KLD_PERCENTILES if q < 50]
    lines += [f"Minimum KLD: {s['kld_min']:10.6f}", "", "====== Token probability statistics ======",
              f"Mean    Δp: {100 * s['dp_mean']:6.3f} ± {100 * s['dp_unc']:5.3f} %",
              f"Maximum Δp: {100 * s['dp_max']:6.3f}%"]
    lines += [f"{_label(q)}   Δp: {100 * s[f'dp_p{q:g}']:6.3f}%" for q in DP_PERCENTILES if q > 50]
    lines.append(f"Median  Δp: {100 * s['dp_median']:6.3f}%")
    lines += [f"{_label(q)}   Δp: {100 * s[f'dp_p{q:g}']:6.3f}%" for q in DP_PERCENTILES if q < 50]
    lines += [f"Minimum Δp: {100 * s['dp_min']:6.3f}%",
              f"RMS Δp    : {100 * s['dp_rms']:6.3f} ± {100 * s['dp_rms_unc']:5.3f} %",
              f"Same top p: {100 * s['same_top']:6.3f} ± {100 * s['same_top_unc']:5.3f} %"]
    return "\n".join(lines)


def _label(q: float) -> str:
    return f"{q:4.1f}%"
