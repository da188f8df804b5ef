"""Where the tokenizer's merge loops hand over to their heaps (docs/performance.md, "Merge loops scanned in C"):
each word length timed both ways on real vocabularies, interleaved rounds, best round of each (CPU time).

    python benchmarks/merge_crossover.py [--rounds 7]

- BPE by rank (models/bpe.py, HEAP_THRESHOLD symbols): merge_loop vs merge_heap on SmolLM2-135M's merges, words
  cut from Botchan at n byte-level symbols.
- BPE by score (models/spm.py, LOOP_MAX_CHARS characters): merge_by_score vs the heap on llama.cpp's llama-spm
  vocabulary, words of n characters (runs of the novel with spaces as "▁").
Prints, per length, loop / heap (below 1 the loop is faster) and the shortest length from which the heap wins
at every longer length measured, beside the threshold the code uses."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_engine.tokenizer.models import bpe, spm  # noqa: E402
from reference_engine.tokenizer.tokenizer import Tokenizer  # noqa: E402
from tests import assets  # noqa: E402

WORDS = 200   # words per length per round


def best_cpu(fns: dict, rounds: int) -> dict:
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - start)
    return best


def crossover(ratios: dict[int, float]) -> int | None:
    """The shortest length from which loop / heap stays above 1."""
    lengths = sorted(ratios)
    for k, n in enumerate(lengths):
        if all(ratios[m] > 1 for m in lengths[k:]):
            return n
    return None


def bpe_ratios(text: str, lengths, rounds: int) -> dict[int, float]:
    model = Tokenizer.from_pretrained(assets.smollm2_dir()).model
    ids = [model.vocab[ch] for ch in text.encode("utf-8").decode("latin-1") if ch in model.vocab]
    out = {}
    for n in lengths:
        words = [ids[i:i + n] for i in range(0, WORDS * n * 3, n * 3)]
        t = best_cpu({"loop": lambda: [bpe.merge_loop(w, model.merges) for w in words],
                      "heap": lambda: [bpe.merge_heap(w, model.merges) for w in words]}, rounds)
        out[n] = t["loop"] / t["heap"]
    return out


def spm_ratios(text: str, lengths, rounds: int) -> dict[int, float]:
    path = Path(assets.cache_root()) / "llamacpp-vocab" / "ggml-vocab-llama-spm.gguf"
    model = Tokenizer.from_pretrained(path).model
    if getattr(model, "score_of", None) is None:
        raise SystemExit(f"{path}: not a score-based vocabulary")
    flat = "▁" + "▁".join(text.split())
    out = {}
    for n in lengths:
        words = [flat[i:i + n] for i in range(0, WORDS * n * 3, n * 3)]
        t = best_cpu({"loop": lambda: [spm.merge_by_score(w, model.score_of) for w in words],
                      "heap": lambda: [model._merge_heap(w) for w in words]}, rounds)
        out[n] = t["loop"] / t["heap"]
    return out


def report(name: str, ratios: dict[int, float], threshold: str) -> None:
    print(f"{name}: loop / heap by length: " + ", ".join(f"{n}: {r:.2f}" for n, r in sorted(ratios.items())))
    print(f"  the heap wins from {crossover(ratios)} on; the code switches at {threshold}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    text = assets.botchan_text()
    report("BPE by rank (symbols)", bpe_ratios(text, (4, 8, 12, 16, 20, 24, 32, 48, 64, 96), args.rounds),
           f"> {bpe.HEAP_THRESHOLD} symbols (HEAP_THRESHOLD)")
    report("BPE by score (characters)", spm_ratios(text, (8, 16, 32, 48, 64, 80, 96, 128, 192), args.rounds),
           f"> {spm.LOOP_MAX_CHARS} characters (LOOP_MAX_CHARS)")


if __name__ == "__main__":
    main()
