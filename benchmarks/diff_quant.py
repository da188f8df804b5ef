"""`llmdoctor diff` on real artifacts: SmolLM2-135M-Instruct (HF, fp32) against its F32 / Q8_0 / Q4_0 GGUFs, a
copy with one layer's v_proj perturbed, and an identical copy. Prints the table in docs/diff.md.

    python3 benchmarks/diff_quant.py --gguf-dir DIR [--text FILE] [--chunks 8] [--layer 12]

DIR holds smollm2-f32.gguf (convert_hf_to_gguf.py from the llama-cpp-python sdist, --outtype f32) and
smollm2-q8_0.gguf / smollm2-q4_0.gguf (scripts/quantize_gguf.py); missing files are skipped. The perturbed and
identical copies are written to a temporary directory. Text: --text, else botchan.txt (tests/assets.py).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from llmdoctor.run.diff_runner import run_diff  # noqa: E402
from tests import assets  # noqa: E402

SELECT = ["DIF020", "DIF030", "DIF040"]


def perturbed_copy(src: Path, out: Path, layer: int) -> Path:
    from safetensors.torch import load_file, save_file
    shutil.copytree(src, out)
    tensors = load_file(str(out / "model.safetensors"))
    name = f"model.layers.{layer}.self_attn.v_proj.weight"
    w = tensors[name]
    tensors[name] = w + 0.05 * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(0))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def row(label: str, report) -> dict:
    kld = next(f for f in report.findings if f.check == "DIF030").evidence
    where = next((f for f in report.findings if f.check == "DIF040"), None)
    first = (where.evidence.get("first_crossing") or {}).get("where", "none") if where else "?"
    own = (where.evidence.get("largest_own_error") or {}).get("where", "none") if where else "?"
    weights = next((f for f in report.findings if f.check == "DIF020" and f.severity.value == "info"), None)
    worst = weights.evidence["ranked"][0] if weights and weights.evidence.get("ranked") else {}
    gen = [f for f in report.findings if f.check == "DIF050"]
    diverged = sum(1 for f in gen if f.severity.value == "warning")
    return {"candidate": label, "kld_mean": kld["kld_mean"], "kld_unc": kld["kld_unc"], "kld_p99": kld["kld_p99"],
            "same_top": kld["same_top"], "ppl_ref": kld["ppl_ref"], "ppl_cand": kld["ppl_cand"],
            "ppl_ratio": kld["ppl_ratio"], "dp_rms": kld["dp_rms"], "first": first, "own": own,
            "worst_tensor": f"{worst.get('tensor', '-')} {worst.get('nmse_db', '-')}",
            "diverged": "-" if not gen else f"{diverged} of 7" if diverged else "none", "positions": kld["positions"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-dir", type=Path, required=True)
    ap.add_argument("--text", type=Path)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--layer", type=int, default=12)
    ap.add_argument("--rows", default="f32,q8_0,q4_0,perturbed,identical",
                    help="which candidates, comma separated (rows can run as separate processes)")
    ap.add_argument("--generation", action="store_true", help="also run DIF050 (greedy continuations)")
    args = ap.parse_args()
    wanted = set(args.rows.split(","))
    select = SELECT + (["DIF050"] if args.generation else [])
    ref = assets.smollm2_dir()
    text = args.text.read_text(encoding="utf-8") if args.text else assets.botchan_text()
    with tempfile.TemporaryDirectory() as tmp:
        cands = [("f32", "F32 GGUF", lambda: args.gguf_dir / "smollm2-f32.gguf"),
                 ("q8_0", "Q8_0 GGUF", lambda: args.gguf_dir / "smollm2-q8_0.gguf"),
                 ("q4_0", "Q4_0 GGUF", lambda: args.gguf_dir / "smollm2-q4_0.gguf"),
                 ("perturbed", f"v_proj of layer {args.layer} perturbed (HF)",
                  lambda: perturbed_copy(ref, Path(tmp) / "perturbed", args.layer)),
                 ("identical", "identical copy (HF)", lambda: Path(shutil.copytree(ref, Path(tmp) / "identical")))]
        rows = []
        for key, label, make in cands:
            if key not in wanted:
                continue
            path = make()
            if not path.exists():
                print(f"skip {label}: {path} missing", file=sys.stderr)
                continue
            started = time.perf_counter()
            report = run_diff(ref, path, text=text, select=select, ctx_len=args.ctx, chunks=args.chunks,
                              device="cpu", dtype="float32")
            rows.append(row(label, report))
            print(f"{label}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            for f in report.findings:
                if f.check == "DIF030":
                    print("\n".join(f.evidence["llama_perplexity"]), file=sys.stderr)
    print("| candidate | mean KLD ± err | 99% KLD | same top-1 | PPL ref -> cand | PPL ratio | RMS Δp | "
          "first layer named (-40 dB) | largest own error | worst tensor (dB) | greedy diverged |")
    print("|---|--:|--:|--:|--:|--:|--:|---|---|---|---|")
    for r in rows:
        print(f"| {r['candidate']} | {r['kld_mean']:.6f} ± {r['kld_unc']:.6f} | {r['kld_p99']:.6f} | "
              f"{100 * r['same_top']:.3f}% | {r['ppl_ref']:.4f} -> {r['ppl_cand']:.4f} | {r['ppl_ratio']:.6f} | "
              f"{100 * r['dp_rms']:.3f}% | {r['first']} | {r['own']} | {r['worst_tensor']} | {r['diverged']} |")
    print(f"\n{rows[0]['positions'] if rows else 0} scored positions per row ({args.chunks} x {args.ctx} windows).")


if __name__ == "__main__":
    main()
