"""Every tokenizer the test suite exercises, paired with a Hugging Face `tokenizers` object over the same vocabulary.

- tokenizer.json directories (SmolLM2, Gemma 3, transformers' conversions of llama.cpp's vocab GGUFs): HF loads
  the same file.
- llama.cpp vocab GGUFs (tests/assets_gguf.GGUF_VOCABS) and Gemma 3's GGUF: ours reads tokenizer.ggml.*. The peer
  of a byte-level (`gpt2`) GGUF is HF over the tokenizer.json equivalent our reader builds (`gguf_spec`: the same
  vocabulary, merges and pre-tokenizer regexes); the peer of a SentencePiece-style (`llama`) GGUF is transformers'
  conversion of that GGUF (merges ranked from the scores), cached like the test assets. GGUFs whose architecture
  transformers cannot convert have no peer and are listed as such.
- SentencePiece tokenizer.model files (Mistral's, in mistral-common): ours runs SentencePiece's own merge; the peer
  is the Llama-2-style tokenizer.json of transformers' SentencePieceExtractor with merges ranked by score, as
  tests/reference_engine/tokenizer/test_tokenizer_real.py builds it.
Whether a peer really is the same tokenizer is checked by the benchmark on its corpus (same ids or not).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tokenizers import Tokenizer as HFTokenizer

from reference_engine.files.gguf_file import GGUFFile
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import assets, assets_gguf

SPM_NORMALIZER = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                       {"type": "Replace", "pattern": {"String": " "},
                                                        "content": "▁"}]}
MISTRAL_MODELS = ("mistral_instruct_tokenizer_240323.model.v3",)


@dataclass
class Peer:
    name: str                              # what the row is called
    source: str                            # how ours loads it: tokenizer.json, GGUF, tokenizer.model
    ours: Callable[[], Tokenizer]
    hf: Callable[[], HFTokenizer]


def peers() -> list[Peer]:
    out = [json_dir("smollm2", assets.smollm2_dir), json_dir("gemma3", assets.gemma3_270m_dir)]
    out += [json_dir(name, lambda n=name: assets.llamacpp_tokenizer_dir(n)) for name in assets.LLAMACPP_VOCABS]
    out += [gguf_peer(name, lambda n=name: assets_gguf.llamacpp_vocab_gguf(n).gguf) for name in assets_gguf.GGUF_VOCABS]
    out.append(Peer("gemma3", "GGUF", lambda: Tokenizer.from_pretrained(assets.gemma3_270m_gguf()),
                    lambda: hf_file(assets.gemma3_270m_dir())))
    out += [sentencepiece_peer(name) for name in MISTRAL_MODELS]
    return out


def json_dir(name: str, directory: Callable[[], Path]) -> Peer:
    return Peer(name, "tokenizer.json", lambda: Tokenizer.from_pretrained(directory()), lambda: hf_file(directory()))


def hf_file(directory: Path) -> HFTokenizer:
    return HFTokenizer.from_file(str(directory / "tokenizer.json"))


def gguf_peer(name: str, gguf: Callable[[], Path]) -> Peer:
    def hf() -> HFTokenizer:
        path = gguf()
        if GGUFFile.open(path).get("tokenizer.ggml.model") == "gpt2":
            return HFTokenizer.from_str(json.dumps(Tokenizer.from_pretrained(path).gguf_spec))
        if name == "llama-spm":   # conversion loses Llama 2's legacy normalizer; the test asset restores it
            return hf_file(assets.llamacpp_tokenizer_dir(name))
        return hf_file(assets_gguf.hf_tokenizer_of_vocab_gguf(name))
    return Peer(name, "GGUF", lambda: Tokenizer.from_pretrained(gguf()), hf)


def sentencepiece_peer(name: str) -> Peer:
    def path() -> Path:
        return assets.mistral_sentencepiece_models()[name]

    def ours() -> Tokenizer:
        from reference_engine.tokenizer.sources.spm_tokenizer import tokenizer_from_sentencepiece
        return tokenizer_from_sentencepiece(path(), Tokenizer, {"add_bos_token": False})

    return Peer(f"mistral-{name.rsplit('.', 1)[-1]}", "tokenizer.model", ours,
                lambda: HFTokenizer.from_str(json.dumps(sentencepiece_spec(path()))))


def sentencepiece_spec(model_path: Path) -> dict:
    """Llama-2-style tokenizer.json of a SentencePiece BPE model, merges ranked by the merged piece's score (as
    SentencePiece merges), built with transformers' SentencePieceExtractor."""
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    extractor = SentencePieceExtractor(str(model_path))
    extracted = extractor.extract(BPE)
    vocab, merges = extracted["vocab"], [list(m) for m in extracted["merges"]]
    score = {p.piece: p.score for p in extractor.proto.pieces}
    merges.sort(key=lambda m: (-score[m[0] + m[1]], vocab[m[0] + m[1]]))
    added = [{"id": i, "content": p.piece, "special": p.type == 3, "normalized": False, "lstrip": False,
              "rstrip": False, "single_word": False}
             for i, p in enumerate(extractor.proto.pieces) if p.type in (2, 3, 4)]
    return {"version": "1.0", "added_tokens": added, "normalizer": SPM_NORMALIZER, "pre_tokenizer": None,
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                      "vocab": vocab, "merges": merges}}
