"""The long-context family's calibration table (docs/context.md): healthy real models beside broken
long-context copies, each read as `llmdoctor check --context N` reads it (CTX003's numbers: the copy ratio at
every distance, each far passage's loss over its near loss) and the verdicts of CTX001/CTX002.

    python benchmarks/context_calibration.py [--tokens 1024] [--only NAME ...]

Rows: SmolLM2-135M-Instruct and Gemma 3 270M (tests/assets.py), SmolLM2 with a window declared for every
layer by design (faults.window_by_design: read to its declared 1024 whatever --tokens says), and the broken
copies of tests/checks/long_context/faults.py. Printed as a Markdown table.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cases(work: Path):
    from tests import assets
    from tests.checks.long_context.faults import GEMMA3_FAULTS, SMOLLM2_FAULTS, window_by_design
    smol, gemma = assets.smollm2_dir(), assets.gemma3_270m_dir()
    yield "SmolLM2-135M", "healthy", lambda: smol
    yield "Gemma 3 270M", "healthy", lambda: gemma
    # a window declared for every layer, as designed (Mistral-7B-v0.1's shape scaled down): read to its 1024
    yield "SmolLM2 window_by_design (256 of 1024)", "design", lambda: window_by_design(smol, work / "design")
    for name, build in SMOLLM2_FAULTS.items():
        yield f"SmolLM2 {name}", "broken", lambda b=build, n=name: b(smol, work / n)
    for name, build in GEMMA3_FAULTS.items():
        yield f"Gemma 3 {name}", "broken", lambda b=build, n=name: b(gemma, work / n)


def measure(path: Path, tokens: int) -> dict:
    from llmdoctor.run.runner import run_checks
    started = time.perf_counter()
    report = run_checks(path, select=["CTX"], context=tokens)
    reach = next(f.evidence for f in report.findings if f.check == "CTX003")
    verdicts = {c: next((f.severity.value for f in report.findings if f.check == c), "pass")
                for c in ("CTX001", "CTX002")}
    return {"reach": reach, **verdicts, "seconds": time.perf_counter() - started}


def oracle_line(name: str, path: Path, tokens: int) -> str:
    """transformers on the same distance prompt: is what the engine read the model's own reading?"""
    from tests.checks.long_context.oracle import transformers_reading
    started = time.perf_counter()
    r = transformers_reading(path, tokens)
    copies = ", ".join(f"{d}: {c:.2f}" for d, c in zip(r["distances"], r["copy_ratios"]))
    return (f"- transformers, {name}: copy ratios {copies}; passages far/near "
            f"{', '.join(f'{p:.2f}' for p in r['passage_ratios'])}; {time.perf_counter() - started:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--only", nargs="*", default=None, help="row names containing any of these")
    parser.add_argument("--oracle", action="store_true",
                        help="under each row, transformers' reading of the same prompt (tests/.../oracle.py)")
    args = parser.parse_args()
    print(f"Read to {args.tokens} tokens (`check --context {args.tokens}`); copy ratio per distance (bound 0.5), "
          "far/near passage loss per position (bound 1.6).\n")
    print("| model | kind | copy ratio at distance | passage far/near at position | CTX001 | CTX002 | s |")
    print("|---|---|---|---|---|---|---|")
    oracles: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, kind, build in cases(Path(tmp)):
            if args.only and not any(o in name for o in args.only):
                continue
            path = build()
            m = measure(path, args.tokens)
            copies = ", ".join(f"{c['distance']}: {c['copy_ratio']:.2f}" for c in m["reach"]["copies"])
            passages = ", ".join(f"{p['position']}: {p['loss'] / p['near_loss']:.2f}" for p in m["reach"]["passages"])
            print(f"| {name} | {kind} | {copies} | {passages} | {m['CTX001']} | {m['CTX002']} | {m['seconds']:.0f} |",
                  flush=True)
            if args.oracle:
                oracles.append(oracle_line(name, path, args.tokens))
    for line in oracles:
        print(line)


if __name__ == "__main__":
    main()
