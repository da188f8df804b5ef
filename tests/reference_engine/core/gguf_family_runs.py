"""What every family's GGUF gets beside its logits test, run on the file its test module converted once:
- an unequal-length batch read from the GGUF (70, 9 and 33 tokens in one prefill, 4-token cache blocks) gives
  each sequence the logits it gets alone from the same file and, where the module has it, from transformers
  (1e-4);
- `llmdoctor check --quick` on the GGUF (the GGF checks, the static, engine and competence families): no check
  crashes, no warning or error beyond the ones a module names as expected, and the engine checks ran.
A tiny model's batch costs well under a second, a check run 2-6 s on a loaded 2-core machine."""
from __future__ import annotations

from pathlib import Path

import torch

from llmdoctor.run.runner import run_checks
from reference_engine.core import CoreEngine
from tests.checks.conftest import competence_standing, no_crashes, problems
from tests.checks.zoo_engine import FAMILY_RUN

LENGTHS = (70, 9, 33)
TOL = 1e-4
RAN = {"GGF001", "GGF003", "WGT001", "GLD002", "ACT001", "ENG001", "CMP001"}


def ragged_batch_equals_alone(path: Path, hf_dir: Path | None = None, tol: float = TOL, high: int = 49000) -> float:
    """The batch's logits per sequence against each sequence alone (same file) and against transformers on
    `hf_dir`, both within `tol` (the batch's products are split differently: not bit-identical, 1.4e-5 measured on
    gpt-oss); token ids drawn from [3, high). Returns the largest difference."""
    prompts = [torch.randint(3, high, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in LENGTHS]
    batched = CoreEngine.from_pretrained(path, block_size=4)
    rows = batched.prefill(list(range(len(prompts))), prompts, all_logits=True).split(list(LENGTHS))
    alone = CoreEngine.from_pretrained(path)
    oracle = None
    if hf_dir is not None:
        from tests.reference_engine.core.tiny_models import load_hf
        oracle = load_hf(hf_dir)
    worst = 0.0
    for got, ids in zip(rows, prompts):
        single = (got - alone.logits(ids)).abs().max().item()
        assert single <= tol, (len(ids), single)
        worst = max(worst, single)
        if oracle is not None:
            from tests.hf_models import hf_logits
            worst = max(worst, (got - hf_logits(oracle, ids)).abs().max().item())
    print(f"\n{Path(path).name}: ragged batch {LENGTHS} vs alone / transformers, max |logit diff| {worst:.2e}")
    assert worst <= tol, worst
    return worst


def check_is_clean(path: Path, expected: frozenset[str] = frozenset(), standing: str = "too small"):
    """`check --quick` on the GGUF: no crash, no warning or error but the `expected` check ids, the engine and
    competence checks ran (CMP measured, not judged: `standing`). Returns the report."""
    report = run_checks(path, select=["GGF", *FAMILY_RUN], quick=True, device="cpu")
    no_crashes(report)
    unexpected = [p for p in problems(report) if p.split()[0] not in expected]
    assert unexpected == [], unexpected
    ran = {r.id for r in report.checks if r.status == "passed"}
    assert RAN <= ran, RAN - ran
    assert competence_standing(report) == standing
    return report
