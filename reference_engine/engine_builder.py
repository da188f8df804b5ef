"""One way to build the reference engine for a run: plan it against the memory budget, then load it resident or
streaming as the plan says (check, diff, generate and baseline all build through here).

    spec = EngineSpec(model_dir, workload=CHECK_QUICK, device="cpu", dtype="float32", memory_budget=4 << 30)
    plan = plan_or_none(spec)              # before anything is loaded; PlanError when not even a layer fits
    built = build_engine(spec, plan)       # BuiltEngine(engine, plan)

The workload (what the command will do to the model) comes from the caller: llmdoctor/run/workloads.py.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


def force_streaming() -> bool:
    """LLMDOCTOR_STREAMING=1 streams even a model that fits (tests, and comparing both paths on one model)."""
    return os.environ.get("LLMDOCTOR_STREAMING", "") not in ("", "0")


@dataclass(frozen=True)
class EngineSpec:
    model_dir: Path
    workload: Any = None               # budget.plan.Workload; None: no plan, the engine is built resident
    device: str = "cpu"                # resolved ("cpu", "cuda", "cuda:1"), not "auto"
    dtype: str = "float32"             # resolved, not "auto"
    memory_budget: int | None = None   # bytes; None: what the machine has available (budget/plan.py)
    adapter: Path | None = None        # a LoRA adapter directory applied on top of the model
    distributed: bool = True           # a torchrun launch splits the layers over its ranks; LLMDOCTOR_STREAMING
    kv_from_plan: bool = True          # size the KV cache to what the plan counted (any device)


@dataclass
class BuiltEngine:
    engine: Any                        # reference_engine.engine.Engine
    plan: Any                          # budget.plan.Plan, None when the model could not be planned


def make_engine_plan(spec: EngineSpec):
    """Resident or streaming, predicted peak and passes, before loading; PlanError when nothing fits."""
    from reference_engine.streaming.pipeline import world
    from reference_engine.budget.plan import make_plan
    from reference_engine.core.engine import resolve_dtype
    ranks, rank = world() if spec.distributed else (1, 0)
    force = "streaming" if spec.distributed and (ranks > 1 or force_streaming()) else None
    return make_plan(spec.model_dir, spec.memory_budget, dtype=resolve_dtype(spec.dtype), device=spec.device,
                     workload=spec.workload, ranks=ranks, rank=rank, force=force, adapter=spec.adapter)


def fallback_reason(spec: EngineSpec, error: Exception) -> str | None:
    """The planner could not size this model (a format or layout it does not know): the one line the report
    states and the run warns with before the engine is built resident without a budget. None for a model whose
    files are broken (a plain ModelDirError): no fallback, the engine build raises the same one-line error. A
    run that must stream (LLMDOCTOR_STREAMING=1, a torchrun pipeline) cannot fall back: PlanError (exit 2)."""
    from reference_engine.streaming.pipeline import world
    from reference_engine.budget.plan import PlanError
    from reference_engine.errors import ModelDirError
    if type(error) is ModelDirError:
        return None
    reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
    if spec.distributed and (force_streaming() or world()[0] > 1):
        raise PlanError(f"{spec.model_dir}: cannot plan the memory of a streamed run ({reason})") from None
    return reason


def fallback_warning(reason: str) -> str:
    return f"warning: no memory plan ({reason}): the engine is built resident, without a budget"


def plan_or_none(spec: EngineSpec, warn: Callable[[str], None] | None = None):
    """The plan, or None without a workload; a model the planner cannot read falls back to an unbudgeted
    resident build, announced through warn (stderr by default; fallback_reason)."""
    import sys
    from reference_engine.streaming.pipeline import PipelineError
    from reference_engine.budget.plan import PlanError
    if spec.workload is None:
        return None
    try:
        return make_engine_plan(spec)
    except (PlanError, PipelineError):
        raise
    except Exception as e:     # any planner failure: stated, never silent
        reason = fallback_reason(spec, e)
        if reason is not None:
            (warn or (lambda text: print(text, file=sys.stderr, flush=True)))(fallback_warning(reason))
        return None


PLAN_HERE = object()   # build_engine's default: make the plan from the spec
BLOCK_SIZE = 16        # the engine's default KV block size


def kv_blocks(plan, kv_from_plan: bool = True, block_size: int = BLOCK_SIZE) -> int | None:
    """KV-cache blocks for a planned engine: the tokens the plan counted (plus two blocks of slack for a
    partial last block), on every device; None (the engine's own default) without a plan. The cache hands out
    the block freed longest ago, so over a run all of its pages get touched: a cache larger than the plan
    counted would end up resident (on a GPU: reserved) beyond the predicted peak."""
    if plan is None or not kv_from_plan:
        return None
    return -(-plan.kv_tokens // block_size) + 2


def build_engine(spec: EngineSpec, plan=PLAN_HERE, *, on_layer: Callable | None = None) -> BuiltEngine:
    """Load the engine as `plan` says (None: resident, unplanned; by default planned here from the spec);
    on_layer(done, total, bytes_read): the progress of a streaming pass."""
    from reference_engine.streaming.pipeline import attach_pipeline
    from reference_engine.engine import Engine
    if plan is PLAN_HERE:
        plan = plan_or_none(spec)
    blocks = kv_blocks(plan, spec.kv_from_plan)
    extra = {} if spec.adapter is None else {"adapter": spec.adapter}
    engine = Engine.from_pretrained(spec.model_dir, device=spec.device, dtype=spec.dtype, num_blocks=blocks,
                                    streaming=plan is not None and plan.streaming, **extra)
    if plan is not None and plan.streaming:
        engine.core.on_layer = on_layer
        attach_pipeline(engine.core, plan)
    elif plan is not None:
        engine.core.pack_decode = plan.pack_decode    # the packed decode copy only where the budget has room
    return BuiltEngine(engine, plan)
