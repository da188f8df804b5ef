"""The competence family's calibration table (docs/competence.md): healthy models vs broken copies, each
measured as CMP001/CMP002 measure it (`llmdoctor check --quick`: the quick built-in text and the copy prompt)
and by transformers on the weights a correct loader reads (the outside judge of the broken copies).

    python benchmarks/competence_calibration.py [--only NAME ...] [--out DIR]

Rows: SmolLM2-135M-Instruct (fp32, bf16), its healthy quantized copies (GPTQ, AWQ, compressed-tensors, FP8,
NF4: tests/quant_builders.py), Gemma 3 270M from its Q4_K_M GGUF, the embedded demo model, and the broken
copies of SmolLM2 (tests/checks/competence/broken.py). Columns: mean loss (nats/token), the unigram baseline,
ln V, the bound, loss / unigram, the copy ratio, and the verdict of each check. Printed as a Markdown table.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEALTHY_QUANT = ("gptq_v1_b4_g32_sym", "awq_gemm_g32", "ct_w4a16_group_sym", "fp8_block_32", "bnb_nf4_dq")


def measure(path: Path, dtype: str = "auto") -> dict:
    """CMP001/CMP002's numbers and verdicts for one model, as `check --quick` computes them (one context: the
    checks read the run the numbers come from)."""
    import checks
    from checks.competence.runs import competence_run
    from checks.catalogue.inputs import CheckInputs
    from llmdoctor.run.runner import run_one
    from probes.competence import copy_score, mean_loss, text_bound, unigram_loss
    ctx = CheckInputs(path, dtype=dtype, quick=True)
    run = competence_run(ctx)
    vocab = ctx.engine.config.vocab_size
    loss, unigram = mean_loss(run.text_logprobs), unigram_loss(run.text.scored_ids)
    ratio = copy_score(run.copy_logprobs, run.copy.start, run.copy.length).ratio if run.copy else math.nan
    out = {"loss": loss, "unigram": unigram, "ln_v": math.log(vocab), "bound": text_bound(math.log(vocab), unigram),
           "copy": ratio}
    for spec in [s for s in checks.load_all() if s.id in ("CMP001", "CMP002")]:
        result, findings = run_one(spec, ctx)
        out[spec.id] = findings[0].severity.value if findings else result.status
    return out


def oracle(path: Path, effective, tokenizer_dir: Path) -> dict:
    from tests.checks.competence.oracle import judge
    return judge(path, effective, tokenizer_dir)


def rows(only: set[str] | None, out: Path):
    from tests import assets
    from tests.checks.competence.broken import BROKEN
    from tests.quant_builders import build_variant
    from llmdoctor.cli import DEMO_MODEL
    smol = assets.smollm2_dir()
    gguf = assets.gemma3_270m_gguf()
    cases = [("SmolLM2-135M fp32", "healthy", lambda: (smol, "float32", None)),
             ("SmolLM2-135M bf16", "healthy", lambda: (smol, "bfloat16", None))]
    cases += [(f"SmolLM2 {v}", "healthy", lambda v=v: (build_variant(v, smol, out / v).path, "auto", None))
              for v in HEALTHY_QUANT]
    cases.append(("Gemma 3 270M Q4_K_M GGUF", "healthy", lambda: (gguf, "auto", None)))
    cases.append(("demo model (0.9M)", "healthy", lambda: (DEMO_MODEL, "auto", None)))
    for name, build in BROKEN.items():
        def make(name=name, build=build):
            b = build(smol, out / name)
            return b.path, "auto", b
        cases.append((f"SmolLM2 {name}", "broken", make))
    for label, kind, make in cases:
        if only and not any(o in label for o in only):
            continue
        path, dtype, broken = make()
        row = {"model": label, "kind": kind, **measure(Path(path), dtype)}
        if broken is not None:
            row["oracle_loss"] = oracle(broken.path, broken.effective, smol)["loss"]
        yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="substrings of the model labels to measure")
    parser.add_argument("--out", type=Path, default=None, help="where the copies are built (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        print("| model | kind | loss | unigram | ln V | bound | loss/unigram | copy ratio | transformers loss | "
              "CMP001 | CMP002 |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        done = []
        for r in rows(set(args.only) if args.only else None, out):
            oracle_loss = f"{r['oracle_loss']:.2f}" if "oracle_loss" in r else ""
            print(f"| {r['model']} | {r['kind']} | {r['loss']:.2f} | {r['unigram']:.2f} | {r['ln_v']:.2f} | "
                  f"{r['bound']:.2f} | {r['loss'] / r['unigram']:.2f} | {r['copy']:.3f} | {oracle_loss} | "
                  f"{r['CMP001']} | {r['CMP002']} |", flush=True)
            done.append(r)
        print()
        for line in ranges(done):
            print(line)


def ranges(done: list[dict]) -> list[str]:
    """The measured ranges the docs quote (docs/competence.md takes them from here, nowhere else): loss/unigram
    and copy ratio of the judged healthy models (50M parameters and up: the demo model is measured, not judged)
    and of the broken copies."""
    out = []
    for kind in ("healthy", "broken"):
        judged = [r for r in done if r["kind"] == kind and r["CMP001"] != "info"]
        if not judged:
            continue
        fractions = [r["loss"] / r["unigram"] for r in judged]
        copies = [r["copy"] for r in judged if math.isfinite(r["copy"])]
        out.append(f"- {kind} ({len(judged)} models): loss/unigram {min(fractions):.2f}-{max(fractions):.2f}, "
                   f"copy ratio {min(copies):.3f}-{max(copies):.3f}")
    return out


if __name__ == "__main__":
    main()
