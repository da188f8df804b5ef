"""SentencePiece tokenizer.model files for tests, written with protobuf's own sentencepiece_model_pb2 (the
oracle), from the real Mistral models of mistral-common and from llama.cpp's Llama 2 vocabulary GGUF."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from sentencepiece import sentencepiece_model_pb2 as pb

from tests import assets

MISTRAL_V1 = "tokenizer.model.v1"          # Mistral 7B v0.1: 32000 pieces, <s> </s> only
MISTRAL_V3 = "mistral_instruct_tokenizer_240323.model.v3"   # 32768 pieces, [INST] etc. as CONTROL pieces,
#                                                              [REFERENCE_DOC_0..19] as USER_DEFINED ones
MISTRAL_V7 = "mistral_instruct_tokenizer_241114.model.v7"   # v3's plus [REF] and [/REF] (USER_DEFINED)


def load(path: Path) -> pb.ModelProto:
    return load_bytes(Path(path).read_bytes())


def load_bytes(data: bytes) -> pb.ModelProto:
    proto = pb.ModelProto()
    proto.ParseFromString(data)
    return proto


def mistral_proto(name: str = MISTRAL_V1) -> pb.ModelProto:
    return load(assets.mistral_sentencepiece_models()[name])


def llama2_proto() -> pb.ModelProto:
    """Llama 2's SentencePiece model rebuilt from llama.cpp's ggml-vocab-llama-spm.gguf (tokens, scores, types)
    with the trainer/normalizer settings of Meta's tokenizer.model (BPE, byte_fallback, identity normalizer,
    add_dummy_prefix, no extra-whitespace removal)."""
    from reference_engine.files.gguf_file import GGUFFile

    gguf = GGUFFile.open(assets.llamacpp_vocab("llama-spm").gguf)
    tokens, scores, types = (gguf.get(f"tokenizer.ggml.{k}") for k in ("tokens", "scores", "token_type"))
    proto = pb.ModelProto()
    for token, score, kind in zip(tokens, scores, types):
        proto.pieces.add(piece=token, score=score, type=kind)
    spec = proto.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = pb.TrainerSpec.BPE, len(tokens), True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    norm = proto.normalizer_spec
    norm.name, norm.add_dummy_prefix, norm.remove_extra_whitespaces, norm.escape_whitespaces = \
        "identity", True, False, True
    return proto


def write_dir(directory: Path, proto: pb.ModelProto | bytes, **files) -> Path:
    """A model directory holding tokenizer.model (+ JSON files given as name=dict, '.' in names as '__')."""
    directory.mkdir(parents=True, exist_ok=True)
    data = proto if isinstance(proto, bytes) else proto.SerializeToString()
    (directory / "tokenizer.model").write_bytes(data)
    for name, content in files.items():
        name = name.replace("__", ".")
        if isinstance(content, str):
            (directory / name).write_text(content, encoding="utf-8")
        else:
            (directory / name).write_text(json.dumps(content, indent=2, ensure_ascii=False), encoding="utf-8")
    return directory


def edited(proto: pb.ModelProto, change: Callable[[pb.ModelProto], None]) -> pb.ModelProto:
    copy = pb.ModelProto()
    copy.CopyFrom(proto)
    change(copy)
    return copy


def converted_dir(directory: Path, spm_dir: Path, *, legacy: bool = True, add_bos: bool = True,
                  add_eos: bool = False, **config) -> Path:
    """spm_dir plus the tokenizer.json and tokenizer_config.json a converted Hugging Face repository holds (what
    transformers 4's LlamaConverter wrote: merges ranked by piece score from transformers' own SpmConverter,
    legacy -> Prepend("▁") + Replace(" ", "▁"), else a Metaspace "first" pre-tokenizer; CONTROL and
    USER_DEFINED pieces as added tokens; BOS/EOS in a TemplateProcessing post-processor)."""
    from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import SpmConverter

    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(spm_dir, directory)
    proto = load(spm_dir / "tokenizer.model")
    pieces = [p.piece for p in proto.pieces]
    tok = SpmConverter.build_tokenizer_from_spm_proto(proto, {p: i for i, p in enumerate(pieces)}, legacy=legacy)
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = None
    else:
        tok.normalizer = None
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1)])
    tok.add_tokens([AddedToken(p.piece, normalized=False, special=p.type != 4)
                    for p in proto.pieces if p.type in (2, 3, 4)])
    bos, eos = pieces[proto.trainer_spec.bos_id], pieces[proto.trainer_spec.eos_id]
    single = (f"{bos}:0 " if add_bos else "") + "$A:0" + (f" {eos}:0" if add_eos else "")
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=[(bos, 1), (eos, 2)])
    tok.save(str(directory / "tokenizer.json"))
    settings = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": add_bos, "add_eos_token": add_eos,
                "legacy": legacy, "bos_token": bos, "eos_token": eos, "unk_token": "<unk>", **config}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    return directory
