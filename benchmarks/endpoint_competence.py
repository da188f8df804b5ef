"""The endpoint competence table (docs/endpoint.md, "Does the deployment talk sense?"): EPT061-063 on real
llama-cpp-python servers serving SmolLM2-135M-Instruct's Q4_1 GGUF, healthy and rewired
(tests/checks/endpoint/broken_ggufs.py), without and with the HF checkpoint as --model.

    python benchmarks/endpoint_competence.py [--only healthy|layers-reversed|embeddings-shuffled ...]

Each row starts the server (one thread, tests/endpoint_assets.LlamaServer), runs `probe endpoint` with the EPT06
checks only, and prints the figures each check judges: text loss beside its bound and the reference's, copy
ratio or greedy copy, sequences continued. Slow: llama-cpp-python's echo sorts the whole vocabulary in Python
for every prompt token (0.1-0.8 s/token on a shared CPU), so a row with --model takes minutes.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS = ("healthy", "layers-reversed", "embeddings-shuffled")


def figures(report) -> str:
    out = []
    for check in ("EPT061", "EPT062", "EPT063"):
        run = next(c for c in report.checks if c.id == check)
        if run.status == "skipped":
            out.append(f"{check} skipped")
            continue
        f = report.findings_for(check)[0]
        e, verdict = f.evidence, f.severity.value
        if check == "EPT061":
            ref = f", reference {e['reference_loss']:.2f}" if "reference_loss" in e else ""
            out.append(f"{check} {verdict}: loss {e['loss']:.2f} (bound {e['bound']:.2f}{ref})")
        elif "copy_ratio" in e:
            ref = f", reference {e['reference']['copy_ratio']:.2f}" if "reference" in e else ""
            out.append(f"{check} {verdict}: ratio {e['copy_ratio']:.2f}{ref}")
        elif check == "EPT062":
            out.append(f"{check} {verdict}: {e['copied_words']}/{len(e['expected'])} words copied")
        else:
            ref = f" (reference {e['reference_continued']}/6)" if "reference_continued" in e else ""
            out.append(f"{check} {verdict}: {e['continued']}/{e['of']}{ref}")
    return ", ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=ROWS, default=list(ROWS))
    args = parser.parse_args()
    from checks.endpoint.reference import Reference
    from llmdoctor.run.endpoint_runner import EndpointOptions, run_endpoint
    from tests.assets import smollm2_dir, smollm2_gguf
    from tests.checks.endpoint.broken_ggufs import broken_gguf
    from tests.endpoint_assets import LlamaServer
    reference = Reference.load(smollm2_dir())
    print("| served GGUF | without --model | with --model (HF SmolLM2) |\n|---|---|---|")
    for row in args.only:
        gguf = smollm2_gguf() if row == "healthy" else broken_gguf(smollm2_gguf(), row)
        with LlamaServer(gguf) as server:
            cells = []
            for ref in (None, reference):
                options = EndpointOptions(server.url, timeout_s=300, deadline_s=3000)
                report = run_endpoint(ref.path if ref else None, options, reference=ref, select=["EPT06"])
                cells.append(figures(report))
        print(f"| {row} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
