"""The calibrated bounds: what any trained model of a vocabulary meets, and why.

Built-in text (mean loss over the applicable parts, nats per token):
- uniform guessing costs ln V; a trained model is far below it. Bound: loss < MAX_LOSS_FRACTION x ln V.
- a unigram model that already knows the text's own token frequencies (probes.competence.scores.unigram_loss,
  optimistic for it) costs about 5.6 nats on the full text (about 5 under --quick's shorter parts). A model
  that reads its context beats it by a wide margin, broken ones lose to it (the measured ranges: docs/
  competence.md, the table printed by benchmarks/competence_calibration.py, the one place they are written).
  Bound: loss < MAX_UNIGRAM_FRACTION x unigram. The margin is wide on purpose: quantization moves a healthy model's
  loss by up to a nat, and a healthy small model on a language it hardly knows (SmolLM2 on German: 5.6 nats under
  --quick) loses to that language's own unigram model, which is why the parts are pooled, never judged one by one.
Copy test (second copy's loss / first copy's): trained decoders predict the second copy from the first
(induction) and measure well under the bound, quantized ones included; untrained or scrambled ones ~1 (the first
copy shows nothing they can use; ranges in docs/competence.md). Bound: ratio < MAX_COPY_RATIO.
A model fails the family when either bound fails; the error is reported by the check that measured it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

MAX_LOSS_FRACTION = 0.6        # of ln V
MAX_UNIGRAM_FRACTION = 1.0     # of the text's own unigram loss
MAX_COPY_RATIO = 0.5           # second copy's loss / first copy's
# The bounds are calibrated on language models from 135M parameters; below this a model is measured, not judged
# (a healthy 0.9M toy reads worse than uniform), and weights still at their initialisation are a test model's.
# From it up, a checkpoint was trained by someone: weights at initialisation are a conversion that lost them.
MIN_JUDGED_PARAMETERS = 50_000_000


@dataclass(frozen=True)
class Verdict:
    ok: bool
    bound: float              # the bound the measurement is held to (nats, or a ratio)
    why: str                  # one line: the measurement beside its bound


def text_bound(ln_v: float, unigram: float) -> float:
    """The largest mean loss a trained model of this vocabulary may have on the text (nats per token)."""
    return min(MAX_LOSS_FRACTION * ln_v, MAX_UNIGRAM_FRACTION * unigram)


def judge_text(loss: float, vocab_size: int, unigram: float) -> Verdict:
    """The built-in text's mean loss against text_bound (nan/inf loss fails)."""
    ln_v = math.log(max(vocab_size, 2))
    bound = text_bound(ln_v, unigram)
    ok = math.isfinite(loss) and loss < bound
    return Verdict(ok, bound, f"mean loss {loss:.2f} nats/token (bound {bound:.2f}: ln V = {ln_v:.2f}, "
                              f"unigram baseline {unigram:.2f})")


def judge_copy(ratio: float) -> Verdict:
    """The copy ratio against MAX_COPY_RATIO (nan/inf fails)."""
    ok = math.isfinite(ratio) and ratio < MAX_COPY_RATIO
    return Verdict(ok, MAX_COPY_RATIO, f"copy ratio {ratio:.2f} (bound {MAX_COPY_RATIO:.2f})")


# Long context (probes/competence/distance.py): a copy pair at any distance is held to MAX_COPY_RATIO
# (judge_copy) as the side-by-side one is; a passage far out is held to MAX_PASSAGE_RATIO of its loss near
# position 0 (healthy models: 0.9-1.3, docs/context.md; a rope read past its positions: 2-3x).
MAX_PASSAGE_RATIO = 1.6        # far loss / near loss of the same passage


def judge_passage(far: float, near: float) -> Verdict:
    """A passage's loss far out against its loss near position 0 (nan/inf fails)."""
    ratio = far / near if math.isfinite(far) and math.isfinite(near) and near > 0 else math.inf
    return Verdict(ratio < MAX_PASSAGE_RATIO, MAX_PASSAGE_RATIO,
                   f"loss {far:.2f} nats vs {near:.2f} near position 0 (ratio {ratio:.2f}, bound "
                   f"{MAX_PASSAGE_RATIO:.2f})")
