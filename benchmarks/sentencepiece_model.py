"""Reading a SentencePiece tokenizer.model: our hand-written reader vs protobuf's (upb, C) ModelProto parse and
sentencepiece's own load, measured in the same run on the real Mistral models of mistral-common (32000 and
32768 pieces). Also times encoding a text with our SentencePiece-mode BPE vs sentencepiece.

Usage: python benchmarks/sentencepiece_model.py [--repeats 20]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.core import best_of  # noqa: E402
from reference_engine.tokenizer.sources.sentencepiece_model import read_sentencepiece_model  # noqa: E402
from reference_engine.tokenizer.sources.spm_tokenizer import tokenizer_from_sentencepiece  # noqa: E402
from reference_engine.tokenizer.tokenizer import Tokenizer  # noqa: E402
from tests import assets  # noqa: E402



def protobuf_read(path: Path):
    from sentencepiece import sentencepiece_model_pb2 as pb
    proto = pb.ModelProto()
    proto.ParseFromString(path.read_bytes())
    return [p.piece for p in proto.pieces], [p.score for p in proto.pieces], [p.type for p in proto.pieces]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    import sentencepiece as spm

    text = assets.botchan_text()[:50_000]
    print(f"{'model':48s} {'pieces':>6s} {'ours ms':>8s} {'protobuf ms':>11s} {'spm load ms':>11s} "
          f"{'ours/pb':>7s} | {'encode ours ms':>14s} {'spm ms':>7s} {'ratio':>6s}")
    for name, path in assets.mistral_sentencepiece_models().items():
        ours = best_of(args.repeats, lambda: read_sentencepiece_model(path))
        pb = best_of(args.repeats, lambda: protobuf_read(path))
        load = best_of(args.repeats, lambda: spm.SentencePieceProcessor(model_file=str(path)))
        tok, sp = tokenizer_from_sentencepiece(path, Tokenizer), spm.SentencePieceProcessor(model_file=str(path))
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text)
        enc = best_of(3, lambda: (tok.model.cache.clear(), tok.encode(text, add_special_tokens=False)))
        enc_sp = best_of(3, lambda: sp.encode(text))
        pieces = len(read_sentencepiece_model(path).pieces)
        print(f"{name:48s} {pieces:6d} {ours * 1e3:8.1f} {pb * 1e3:11.1f} {load * 1e3:11.1f} {ours / pb:7.1f} | "
              f"{enc * 1e3:14.1f} {enc_sp * 1e3:7.1f} {enc / enc_sp:6.1f}")


if __name__ == "__main__":
    main()
