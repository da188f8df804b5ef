"""Do the weights still hold their initialisation? Decided from the weights alone, never from the outputs a check
judges: broken weights also push the probe loss towards uniform, and must not downgrade their own findings.

A freshly initialised checkpoint (factory test models, `from_config` without training) draws every matrix from
a normal distribution with std `initializer_range` (transformers' default 0.02) and sets norm gains to ones. A
trained one moves away on every count: matrices change scale and grow heavy tails (outlier weights an iid
normal draw would essentially never produce), and norm gains drift away from 1. Untrained means ALL of these
hold on the tensors judged (every norm gain; the embedding, lm_head and the first and last layers' matrices):

- each 2-D float matrix has RMS within MATRIX_RMS_TOLERANCE of initializer_range and max |w| at most
  GAUSSIAN_TAIL x RMS x sqrt(2 ln n) (the largest of n normal draws is about RMS x sqrt(2 ln n));
- each norm gain vector has RMS within NORM_RMS_TOLERANCE of 1 and max |w| at most NORM_AMAX;
- nothing is NaN/Inf (broken is not untrained).

SmolLM2-135M fails the first rule on every matrix (RMS 2-20x initializer_range, tails 2-7x), the trained demo
model on every matrix too (RMS 1.3-6x), while factory and transformers-initialised models pass all three."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from checks.shared.weights.tensor_layout import EMBED, LAYER_INDEX, LM_HEAD
from checks.shared.weights.tensor_scan import TensorStats, scan_weights
from probes.competence.bounds import MIN_JUDGED_PARAMETERS

DEFAULT_INITIALIZER_RANGE = 0.02   # transformers' PretrainedConfig default
MATRIX_RMS_TOLERANCE = 0.25        # |rms / initializer_range - 1|
GAUSSIAN_TAIL = 1.3
NORM_RMS_TOLERANCE = 0.1
NORM_AMAX = 1.5
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
STATE_KEY = "init_state"


@dataclass
class InitVerdict:
    untrained: bool
    reason: str                        # one line: why (the first tensor that is not at its initialisation)
    judged: int                        # tensors looked at
    initializer_range: float
    tensors: list[dict] = field(default_factory=list)   # per judged tensor: name, kind, rms, amax, at_init

    def evidence(self) -> dict:
        return {"weights_at_initialisation": self.untrained, "reason": self.reason, "tensors_judged": self.judged,
                "initializer_range": self.initializer_range,
                "not_at_init": [t for t in self.tensors if not t["at_init"]][:5]}


def is_norm_gain(name: str, shape: tuple) -> bool:
    return len(shape) == 1 and name.endswith("norm.weight")


def judged_names(weights) -> list[str]:
    """Every norm gain; the embedding and lm_head; the first and last layers' float matrices. Only the decoder's:
    a multimodal checkpoint's vision tower (the table's `droppable` names) has its own initialisation."""
    skip = getattr(weights, "droppable", frozenset())
    names = [n for n in weights.names if n not in skip]
    layers = [int(m.group(1)) for m in map(LAYER_INDEX.search, names) if m]
    ends = {min(layers), max(layers)} if layers else set()
    out = []
    for name in names:
        info = weights.info(name)
        if info.dtype not in FLOAT_DTYPES:
            continue
        layer = LAYER_INDEX.search(name)
        if is_norm_gain(name, tuple(info.shape)) or (len(info.shape) == 2 and (
                name in (EMBED, LM_HEAD) or (layer is not None and int(layer.group(1)) in ends))):
            out.append(name)
    return out


def tensor_at_init(name: str, shape: tuple, stats: TensorStats, init_range: float,
                   norm_init: float = 1.0) -> tuple[bool, str]:
    if stats.nonfinite:
        return False, f"{name} holds {stats.nonfinite} NaN/Inf values"
    rms, amax = stats.rms, stats.amax
    if is_norm_gain(name, shape):
        if abs(rms - norm_init) > NORM_RMS_TOLERANCE or amax > NORM_AMAX:
            return False, f"norm gain {name} has RMS {rms:.3g} and max {amax:.3g} (initialised: {norm_init:g})"
        return True, ""
    if not rms or abs(rms / init_range - 1.0) > MATRIX_RMS_TOLERANCE:
        return False, f"{name} has RMS {rms:.3g}, {rms / init_range:.3g}x initializer_range {init_range:g}"
    bound = GAUSSIAN_TAIL * rms * math.sqrt(2.0 * math.log(max(stats.numel, 2)))
    if amax > bound:
        return False, f"{name} has max |w| {amax:.3g}, beyond what a normal draw of std {rms:.3g} gives ({bound:.3g})"
    return True, ""


def judge(stats: dict[str, TensorStats], shapes: dict[str, tuple], init_range: float,
          norm_init: float = 1.0) -> InitVerdict:
    """norm_init: the norm weights' initial value (1; 0 for Gemma, whose weights are offsets: 1 + w)."""
    rows, first = [], ""
    for name, s in stats.items():
        ok, why = tensor_at_init(name, shapes[name], s, init_range, norm_init)
        rows.append({"name": name, "kind": "norm" if is_norm_gain(name, shapes[name]) else "matrix",
                     "rms": s.rms, "amax": s.amax, "at_init": ok})
        first = first or why
    matrices = [r for r in rows if r["kind"] == "matrix"]
    if not matrices:
        return InitVerdict(False, "no float matrices to judge (quantized?): treated as trained", len(rows),
                           init_range, rows)
    if first:
        return InitVerdict(False, f"trained: {first}", len(rows), init_range, rows)
    return InitVerdict(True, f"all {len(matrices)} judged matrices are normal draws of std ~initializer_range "
                             f"{init_range:g} and every norm gain is ~1", len(rows), init_range, rows)


def initializer_range(raw_config: dict) -> float:
    """The decoder's: a multimodal wrapper's text_config says its own (the top level's is the vision side's)."""
    text = raw_config.get("text_config")
    value = (text if isinstance(text, dict) and "initializer_range" in text else raw_config).get("initializer_range")
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 10
    return float(value) if ok else DEFAULT_INITIALIZER_RANGE


def norm_init(ctx) -> float:
    """0 for the families whose norm weights are offsets from 1 (Gemma: the
    stored weight w scales by 1 + w), else 1."""
    from reference_engine.core.families import is_supported, settings
    try:
        cfg = ctx.config
        return 0.0 if is_supported(cfg.architecture) and settings(cfg).norm == "rms_plus_one" else 1.0
    except Exception:   # a config the engine rejects is judged elsewhere; keep the common convention
        return 1.0


def init_state(ctx) -> InitVerdict:
    """The run's verdict (cached): reuses the full weight scan when a weights check made one already."""
    if STATE_KEY not in ctx.state:
        init_range = initializer_range(ctx.raw_config)
        try:
            weights = ctx.weights
            names = judged_names(weights)
            full = ctx.state.get("weight_scan")
            scan = full if full is not None else scan_weights(weights, row_tensors=(), names=names)
            stats = {n: scan.tensors[n] for n in names if n in scan.tensors}
            shapes = {n: tuple(weights.info(n).shape) for n in stats}
            verdict = judge(stats, shapes, init_range, norm_init(ctx))
        except Exception as e:  # weights the scan cannot read are judged elsewhere (WGT, FIL); keep severities
            verdict = InitVerdict(False, f"weights could not be judged ({type(e).__name__}: {e}): treated as "
                                         "trained", 0, init_range)
        ctx.state[STATE_KEY] = verdict
    return ctx.state[STATE_KEY]


def parameter_count(ctx) -> int:
    """Logical parameters of the model (dequantized shapes; 0 when the table cannot be read)."""
    try:
        weights = ctx.weights
        total = 0
        for name in weights.names:
            n = 1
            for d in weights.info(name).shape:
                n *= int(d)
            total += n
        return total
    except Exception:
        return 0


@dataclass(frozen=True)
class InitStanding:
    """How a check that judges outputs reports a model at its initialisation."""
    severity: str | None      # None: the check's own severity; "info": measured, not judged
    prefix: str               # what the message starts with ("" for a trained model)
    evidence: dict


def init_standing(ctx) -> InitStanding:
    """Trained weights: judged as usual. Weights at initialisation below MIN_JUDGED_PARAMETERS (the factory and
    toy models tests build, a `from_config` sketch): info, named untrained. At or above it: judged at the check's
    own severity and named: a checkpoint that size was trained by someone, so weights still at their
    initialisation are a conversion or save that lost them (a loader that skipped every tensor, then saved the
    freshly built module)."""
    verdict = init_state(ctx)
    evidence = verdict.evidence()
    if not verdict.untrained:
        return InitStanding(None, "", evidence)
    count = parameter_count(ctx)
    evidence = {**evidence, "parameters": count}
    if count >= MIN_JUDGED_PARAMETERS:
        return InitStanding(None, f"weights still at their initialisation in a {count / 1e6:.0f}M-parameter "
                                  "model (a conversion or save lost the trained weights): ", evidence)
    return InitStanding("info", "untrained (weights still at their initialisation): ", evidence)
