"""Tokenizer throughput: our pure-Python BPE against Hugging Face `tokenizers` (Rust), same run.

    python benchmarks/tokenizer.py [--repeats 3] [--cjk-file PATH]

Corpus (about 1 MB): Botchan (English novel, from the sentencepiece sdist) + CJK text + Python source
(the standard library's own modules). Without --cjk-file the CJK third is generated deterministically
from common Han/kana characters and punctuation (no CJK prose ships in the packages we may fetch);
pass a real file to measure on prose. Tokenizers: SmolLM2-135M's and Qwen2's (llama.cpp vocab).

Prints MB/s for both and ours/HF, cold (word caches emptied on both sides) and warm (best of
--repeats re-encoding the same corpus, caches full), then time per MB from 1 KB to 1 MB to show linear scaling. Both
sides run single-threaded: TOKENIZERS_PARALLELISM=false and one `encode` call per text.
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

from tokenizers import Tokenizer as HFTokenizer  # noqa: E402  (after the env var, on purpose)

from reference_engine.tokenizer.tokenizer import Tokenizer  # noqa: E402
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


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def throughput(name: str, directory: Path, corpus: str, repeats: int) -> None:
    megabytes = len(corpus.encode("utf-8")) / 1e6
    ours, hf = Tokenizer.from_pretrained(directory), HFTokenizer.from_file(str(directory / "tokenizer.json"))
    assert ours.encode(corpus) == hf.encode(corpus).ids, f"{name}: ids differ from Hugging Face"
    # cold: word caches emptied before the run; warm: the same corpus again, caches full (best of repeats)
    ours_cold, hf_cold = cold_seconds(ours, hf, corpus)
    ours_warm = min(seconds(lambda: ours.encode(corpus)) for _ in range(repeats))
    hf_warm = min(seconds(lambda: hf.encode(corpus)) for _ in range(repeats))
    for label, mine, theirs in (("cold", ours_cold, hf_cold), ("warm", ours_warm, hf_warm)):
        print(f"{name:8s} {label}  ours {megabytes / mine:6.2f} MB/s   HF {megabytes / theirs:6.2f} MB/s   "
              f"ours/HF {theirs / mine:5.2f}x")


def cold_seconds(ours: Tokenizer, hf: HFTokenizer, text: str) -> tuple[float, float]:
    """Best-of-k encode time with empty word caches on both sides (k larger for small inputs, where a
    single run is too short to time on a busy machine)."""
    repeats = max(1, min(20, 200_000 // max(len(text), 1)))
    mine, theirs = [], []
    for _ in range(repeats):
        ours.word_cache.clear()
        ours.model.cache.clear()
        hf.model._clear_cache()
        mine.append(seconds(lambda: ours.encode(text)))
        theirs.append(seconds(lambda: hf.encode(text)))
    return min(mine), min(theirs)


def scaling(name: str, directory: Path, corpus: str) -> None:
    print(f"{name}: seconds per MB by input size (word caches emptied before every run)")
    ours, hf = Tokenizer.from_pretrained(directory), HFTokenizer.from_file(str(directory / "tokenizer.json"))
    for size in SIZES:
        text = (corpus * (size // len(corpus) + 1))[:size]
        per_mb = len(text.encode("utf-8")) / 1e6
        mine, theirs = cold_seconds(ours, hf, text)
        mine_run, theirs_run = cold_seconds(ours, hf, "a" * size)
        print(f"  {size:>9,d} chars  corpus: ours {mine / per_mb:6.3f} s/MB  HF {theirs / per_mb:6.3f} s/MB"
              f"   one-char run: ours {mine_run / (size / 1e6):6.3f} s/MB  HF {theirs_run / (size / 1e6):6.3f} s/MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm runs; the best is reported")
    parser.add_argument("--cjk-file", default=None, help="UTF-8 CJK prose to use instead of generated text")
    args = parser.parse_args()
    corpus = build_corpus(args.cjk_file)
    print(f"corpus: {len(corpus):,d} chars, {len(corpus.encode('utf-8')) / 1e6:.2f} MB "
          "(Botchan + CJK + Python source); single thread")
    tokenizers = {"smollm2": assets.smollm2_dir(), "qwen2": assets.llamacpp_tokenizer_dir("qwen2")}
    for name, directory in tokenizers.items():
        throughput(name, directory, corpus, args.repeats)
    for name, directory in tokenizers.items():
        scaling(name, directory, corpus)


if __name__ == "__main__":
    main()
