"""Tokenizer throughput: our pure-Python tokenizers against Hugging Face `tokenizers` (Rust), same run, same vocabulary.

    python benchmarks/tokenizer.py [--rounds 3] [--only NAME,...] [--corpus-kb 1000] [--doc-kb 10] [--cjk-file PATH]
                                   [--scaling]

Every tokenizer the test suite exercises that HF can load too (benchmarks/tokenizer_peers.py): tokenizer.json
directories, llama.cpp's vocab GGUFs, Gemma 3 (262k vocabulary), Mistral's SentencePiece tokenizer.model.
Corpus (about 1 MB): Botchan (English novel, from the sentencepiece sdist) + CJK text + Python source (the
standard library's own modules). Without --cjk-file the CJK part is generated deterministically from common
Han/kana characters and punctuation (no CJK prose ships in the packages we may fetch).

The corpus is encoded as documents of about --doc-kb thousand characters, cut at line ends, one `encode` call
each: Hugging Face slows down on one huge string (SmolLM2 on Botchan: 1.4 MB/s per 10 KB call, 1.15 MB/s in one
274 KB call), so a single 1 MB call would flatter us; --doc-kb 0 measures that anyway.

Per tokenizer: both sides must give the same ids on every document (a row says so; a peer that differs is not a
measurement of the same tokenizer and is left out of the verdict). Cold = the word caches emptied on both sides,
then every document encoded (text the tokenizer has not seen), best of --rounds rounds, ours and HF interleaved in
each round; warm = the same documents again with the caches full. Both sides run single-threaded
(TOKENIZERS_PARALLELISM=false, one `encode` call per document). Ratios are ours/HF in throughput, from wall time and
from this process's CPU time (time.process_time; steadier on a shared machine). The last line names every
tokenizer below 1.0x cold. --scaling adds time per MB from 1 KB to 1 MB for SmolLM2 and Phi-3.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tokenizer_peers import Peer, peers  # noqa: E402  (after the env var, on purpose)
from tests import assets  # noqa: E402

SIZES = (1_000, 10_000, 100_000, 1_000_000)


def synthetic_cjk(n_chars: int, seed: int = 0) -> str:
    """Sentences of common Han characters with kana and full-width punctuation, deterministic."""
    rng = random.Random(seed)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 2500)]
    kana = [chr(c) for c in range(0x3041, 0x3097)]
    out, size = [], 0
    while size < n_chars:
        sentence = "".join(rng.choice(han) if rng.random() < 0.7 else rng.choice(kana)
                           for _ in range(rng.randint(6, 30)))
        sentence += rng.choice("。，、！？") + ("\n" if rng.random() < 0.1 else "")
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:n_chars]


def python_source(n_chars: int) -> str:
    """Real code: the standard library's own source files, concatenated."""
    parts, size = [], 0
    for path in sorted(Path(os.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= n_chars:
            break
    return "".join(parts)[:n_chars]


def build_corpus(cjk_file: str | None, third: int = 350_000) -> str:
    english = assets.botchan_text()[:third]
    cjk = Path(cjk_file).read_text(encoding="utf-8")[:third] if cjk_file else synthetic_cjk(third // 3)
    return english + cjk + python_source(third)


def documents(corpus: str, doc_chars: int) -> list[str]:
    """`corpus` cut into documents of about `doc_chars` characters at line ends (one document if 0)."""
    if doc_chars <= 0:
        return [corpus]
    docs, start = [], 0
    while start < len(corpus):
        end = corpus.find("\n", start + doc_chars)
        end = len(corpus) if end < 0 else end + 1
        docs.append(corpus[start:end])
        start = end
    return docs


def encode_all(tokenizer, docs: list[str]) -> list[list[int]]:
    """Ids of every document with either side's tokenizer (no BOS/EOS)."""
    if hasattr(tokenizer, "encode_batch"):   # Hugging Face: one call per document, not its batch API
        return [tokenizer.encode(d, add_special_tokens=False).ids for d in docs]
    return [tokenizer.encode(d, add_special_tokens=False) for d in docs]


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def clear_caches(ours, hf) -> None:
    ours.clear_caches()
    hf.model._clear_cache()


def cold_times(ours, hf, docs: list[str], rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Best (wall, CPU) of each side over `rounds` interleaved cold passes over `docs`."""
    mine, theirs = [], []
    for _ in range(rounds):
        clear_caches(ours, hf)
        mine.append(timed(lambda: encode_all(ours, docs)))
        theirs.append(timed(lambda: encode_all(hf, docs)))
    return best(mine), best(theirs)


def warm_times(ours, hf, docs: list[str], rounds: int) -> tuple[tuple[float, float], tuple[float, float]]:
    encode_all(ours, docs)
    encode_all(hf, docs)
    mine = [timed(lambda: encode_all(ours, docs)) for _ in range(rounds)]
    theirs = [timed(lambda: encode_all(hf, docs)) for _ in range(rounds)]
    return best(mine), best(theirs)


def best(times: list[tuple[float, float]]) -> tuple[float, float]:
    return min(t[0] for t in times), min(t[1] for t in times)


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def measure(peer: Peer, docs: list[str], rounds: int) -> tuple[str, float | None]:
    """One markdown row for `peer`, and its cold CPU-time ratio (None when there is no comparable peer)."""
    label = f"| {peer.name} | {peer.source} |"
    try:
        ours, hf = peer.ours(), peer.hf()
    except Exception as e:  # a peer transformers cannot build: say so, measure the rest
        return f"{label} no HF peer: {type(e).__name__}: {str(e)[:80]} |", None
    mine, theirs = encode_all(ours, docs), encode_all(hf, docs)
    for doc, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return (f"{label} ids differ from HF in document {doc} at token {first_difference(a, b)}: "
                    "not compared |"), None
    megabytes = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    (cold_wall, cold_cpu), (hf_cold_wall, hf_cold_cpu) = cold_times(ours, hf, docs, rounds)
    (warm_wall, _), (hf_warm_wall, _) = warm_times(ours, hf, docs, rounds)
    cold_ratio = hf_cold_cpu / cold_cpu
    return (f"{label} same ({sum(map(len, mine)):,d}) | {megabytes / cold_wall:.2f} | {megabytes / hf_cold_wall:.2f} | "
            f"**{hf_cold_wall / cold_wall:.2f}x** | {cold_ratio:.2f}x | {megabytes / warm_wall:.2f} | "
            f"{megabytes / hf_warm_wall:.2f} | {hf_warm_wall / warm_wall:.2f}x |"), cold_ratio


def scaling(peer: Peer, corpus: str) -> None:
    print(f"\n{peer.name} ({peer.source}): seconds per MB by input size, cold (caches emptied before every run)")
    ours, hf = peer.ours(), peer.hf()
    for size in SIZES:
        text = (corpus * (size // len(corpus) + 1))[:size]
        per_mb = len(text.encode("utf-8")) / 1e6
        rounds = max(1, min(20, 200_000 // size))
        (mine, _), (theirs, _) = cold_times(ours, hf, [text], rounds)
        (mine_run, _), (theirs_run, _) = cold_times(ours, hf, ["a" * size], rounds)
        print(f"  {size:>9,d} chars  corpus: ours {mine / per_mb:6.3f} s/MB  HF {theirs / per_mb:6.3f} s/MB"
              f"   one-char run: ours {mine_run / (size / 1e6):6.3f} s/MB  HF {theirs_run / (size / 1e6):6.3f} s/MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved cold rounds and warm runs; best is kept")
    parser.add_argument("--only", default=None, help="comma-separated row names (e.g. phi-3,smollm2)")
    parser.add_argument("--corpus-kb", type=int, default=1000, help="corpus size in thousands of characters")
    parser.add_argument("--doc-kb", type=int, default=10, help="document size in thousands of characters; "
                                                                   "0: the corpus in one encode call")
    parser.add_argument("--cjk-file", default=None, help="UTF-8 CJK prose to use instead of generated text")
    parser.add_argument("--scaling", action="store_true", help="also print time per MB by input size")
    args = parser.parse_args()
    corpus = build_corpus(args.cjk_file, third=args.corpus_kb * 1000 // 3)
    docs = documents(corpus, args.doc_kb * 1000)
    print(f"corpus: {len(corpus):,d} chars, {len(corpus.encode('utf-8')) / 1e6:.2f} MB (Botchan + CJK + Python "
          f"source) in {len(docs)} documents; single thread; load average {os.getloadavg()[0]:.1f}\n")
    print("| tokenizer | loaded from | ids vs HF (tokens) | ours cold MB/s | HF cold MB/s | cold ours/HF (wall) | "
          "cold ours/HF (CPU) | ours warm MB/s | HF warm MB/s | warm ours/HF |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    wanted = set(args.only.split(",")) if args.only else None
    selected = [p for p in peers() if wanted is None or p.name in wanted]
    below = []
    for peer in selected:
        row, ratio = measure(peer, docs, args.rounds)
        print(row, flush=True)
        if ratio is not None and ratio < 1.0:
            below.append(f"{peer.name} ({peer.source}) {ratio:.2f}x")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    print("below 1.0x cold (CPU time): " + (", ".join(below) if below else "none"))
    if args.scaling:
        for peer in selected:
            if peer.name in ("smollm2", "phi-3"):
                scaling(peer, corpus)


if __name__ == "__main__":
    main()
