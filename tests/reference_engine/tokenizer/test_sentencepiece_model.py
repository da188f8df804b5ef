"""tokenizer.model read by hand: the protobuf fields equal protobuf's own parse, a directory holding only a
SentencePiece BPE tokenizer.model encodes and decodes exactly as `sentencepiece` (real Mistral and Llama 2
models, user-defined pieces included), its flags follow tokenizer_config.json, and what cannot be run is refused
in one line naming the file."""
from __future__ import annotations

import pytest
import sentencepiece as spm

from reference_engine.errors import ModelDirError, UnsupportedError
from reference_engine.tokenizer.sources.sentencepiece_model import read_sentencepiece_model
from reference_engine.tokenizer.tokenizer import Tokenizer
from tests import spm_files

pytestmark = pytest.mark.assets

# unicode scripts, whitespace runs (leading, trailing, inner, tabs, newlines), digits, characters only byte
# fallback can encode, emoji with modifiers and ZWJ, a literal "▁", control characters, a long repeat
CORPUS = ["Hello world", "  leading spaces", "trailing   ", "tabs\tand\nnewlines\r\n\n", "x  y   z    w",
          "digits 1234567890 3.14159 -42", "emoji 😀👍🏽 👨\u200d👩\u200d👧 🇫🇷", "日本語のテキスト、ひらがな",
          "한국어 텍스트", "Ελληνικά и русский", "\x00\x01\x1b[0m ctrl", "", " ", "\u2581literal \u2581\u2581",
          "nbsp\u00a0and\u3000ideographic space", "ｆｕｌｌ width ﬁ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 \U000e0041", "a" * 300,
          "def f(x):\n    return {'a': x ** 2}\n", "ÀÉÎõü çà", "\ufffd replacement", "العربية עברית हिन्दी"]


@pytest.fixture(scope="module")
def models(mistral_sentencepiece_models, tmp_path_factory):
    """name -> (directory holding only tokenizer.model, its path): four Mistral models and Llama 2's."""
    root = tmp_path_factory.mktemp("spm")
    out = {name: (spm_files.write_dir(root / name, path.read_bytes()), path)
           for name, path in mistral_sentencepiece_models.items()}
    llama = spm_files.write_dir(root / "llama2", spm_files.llama2_proto())
    out["llama2"] = (llama, llama / "tokenizer.model")
    return out


def user_defined_corpus(pieces: list[str]) -> list[str]:
    """Texts holding user-defined pieces where sentencepiece and transformers' added-token rule part ways: at the
    start, after a space or none, twice in a row, glued to words, around "▁" and whitespace runs, cut short."""
    out = []
    for piece in pieces:
        out += [piece, f" {piece}", f"{piece} ", f"a{piece}b", f"a {piece} b", f"{piece}{piece}", f"{piece} {piece}",
                f"Hello {piece}world", f"x\n{piece}\ny", f"  {piece}  end", f"\u2581{piece}", f"{piece}\u2581x",
                f"{piece[:-1]} {piece[:-1]}x", f"see {piece}: 😀 {piece[1:]}", f"{piece}3.14"]
    return out


@pytest.mark.parametrize("name", [spm_files.MISTRAL_V3, spm_files.MISTRAL_V7])
def test_user_defined_pieces_equal_sentencepiece(models, botchan_text, name):
    """Mistral v3's [REFERENCE_DOC_n] and v7's [REF]/[/REF] are USER_DEFINED pieces: sentencepiece matches them in
    the normalized text as frozen symbols and adds the dummy prefix once (transformers' added-token rule, which
    matches them in the raw text and prefixes every stretch after one, gives other ids: transformers#25073)."""
    directory, path = models[name]
    sp = spm.SentencePieceProcessor(model_file=str(path))
    pieces = [p.piece for p in spm_files.load(path).pieces if p.type == 4]   # USER_DEFINED
    corpus = user_defined_corpus(pieces) + CORPUS + botchan_text.splitlines()[:100]
    assert len(pieces) >= 20 and len(corpus) >= 356
    tok = Tokenizer.from_pretrained(directory)
    differ = [t for t in corpus if tok.encode(t, add_special_tokens=False) != sp.encode(t)]
    assert differ == []
    for text in corpus[:60]:
        assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text


@pytest.mark.parametrize("name", [spm_files.MISTRAL_V1, spm_files.MISTRAL_V3, "llama2"])
def test_fields_equal_protobuf(models, name):
    path = models[name][1]
    ours, ref = read_sentencepiece_model(path), spm_files.load(path)
    assert ours.pieces == [p.piece for p in ref.pieces]
    assert ours.scores == [p.score for p in ref.pieces]
    assert ours.types == [p.type for p in ref.pieces]
    for table, spec in ((ours.trainer, ref.trainer_spec), (ours.normalizer, ref.normalizer_spec)):
        for key, value in table.items():
            expected = getattr(spec, key)
            assert (list(expected) if key.endswith("symbols") else expected) == value, key


def test_ids_and_text_equal_sentencepiece(models, botchan_text):
    corpus = CORPUS + botchan_text.splitlines()[:400]
    for name, (directory, path) in models.items():
        tok, sp = Tokenizer.from_pretrained(directory), spm.SentencePieceProcessor(model_file=str(path))
        for text in corpus:
            ids = sp.encode(text)
            assert tok.encode(text, add_special_tokens=False) == ids, (name, text)
            assert tok.decode(ids) == sp.decode(ids), (name, text)
        assert tok.encode(botchan_text[:20000], add_special_tokens=False) == sp.encode(botchan_text[:20000])


def test_llama2_reproduces_llama_cpp_vectors(models, llamacpp_vocab):
    tok, vectors = Tokenizer.from_pretrained(models["llama2"][0]), llamacpp_vocab("llama-spm")
    for text, expected in zip(vectors.inputs, vectors.expected_ids):
        assert tok.encode(text, add_special_tokens=False) == expected, text


def test_unused_pieces_are_split_back_and_unknowns_merge_without_byte_fallback(models, tmp_path):
    """sentencepiece's resegment (an UNUSED piece never appears in the output) and its unknown runs (one <unk>
    per run when byte_fallback is off), on the Mistral model edited with protobuf."""
    proto = spm_files.mistral_proto()
    hello = next(i for i, p in enumerate(proto.pieces) if p.piece == "▁Hello")

    def change(p):
        p.pieces[hello].type = 5   # UNUSED
        p.trainer_spec.byte_fallback = False
        for piece in p.pieces:
            if piece.type == 6:
                piece.type = 5
    d = spm_files.write_dir(tmp_path / "m", spm_files.edited(proto, change))
    tok, sp = Tokenizer.from_pretrained(d), spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    for text in ("Hello world", "Hello 😀😀 ☃ end", "emoji 👍🏽", *CORPUS):
        assert tok.encode(text, add_special_tokens=False) == sp.encode(text), text
    assert hello not in tok.encode("Hello")


def test_flags_from_tokenizer_config(models, tmp_path):
    directory = models[spm_files.MISTRAL_V1][0]
    tok = Tokenizer.from_pretrained(directory)
    assert tok.encode("hi")[0] == tok.bos_token_id == 1 and tok.eos_token_id == 2 and tok.unk_token_id == 0
    assert tok.encode("<s>Hi") == [1, 1, *tok.encode(" Hi", add_special_tokens=False)[1:]]   # legacy: "▁Hi"
    d = spm_files.write_dir(tmp_path / "flags", directory.joinpath("tokenizer.model").read_bytes(),
                            tokenizer_config__json={"add_bos_token": False, "add_eos_token": True, "legacy": False})
    tok = Tokenizer.from_pretrained(d)
    assert tok.encode("hi")[-1] == 2 and tok.encode("hi")[0] != 1
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    assert tok.encode("<s>Hi", add_special_tokens=False) == [1, sp.piece_to_id("Hi")] != [1, sp.unk_id()]


def test_matches_the_converted_tokenizer_json(models, tmp_path):
    """The same directory with the tokenizer.json transformers' converter writes encodes the same, special
    tokens in the text included (both legacy settings), except where the converted file leaves sentencepiece:
    user-defined pieces (added tokens there) and, with legacy=false, a text starting with a space (tokenizers'
    Metaspace skips its prefix when the text already starts with "▁"; sentencepiece always adds it)."""
    spm_dir = models[spm_files.MISTRAL_V3][0]
    sp = spm.SentencePieceProcessor(model_file=str(spm_dir / "tokenizer.model"))
    for legacy in (True, False):
        converted = spm_files.converted_dir(tmp_path / f"conv-{legacy}", spm_dir, legacy=legacy)
        ours = Tokenizer.from_pretrained(spm_dir if legacy else spm_files.write_dir(
            tmp_path / f"plain-{legacy}", spm_dir.joinpath("tokenizer.model").read_bytes(),
            tokenizer_config__json={"legacy": False}))
        reference = Tokenizer.from_pretrained(converted)
        for text in CORPUS[:12] + ["[INST] hi [/INST] ok</s>", "<s>[INST]x", "a [TOOL_CALLS] b"]:
            if legacy or not text.startswith(" "):
                assert ours.encode(text) == reference.encode(text), (legacy, text)
        text = "a [REFERENCE_DOC_3]b" if legacy else "  leading spaces"
        assert ours.encode(text, add_special_tokens=False) == sp.encode(text)
        assert reference.encode(text, add_special_tokens=False) != sp.encode(text), text


def test_missing_and_refused_files_name_the_file(models, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelDirError, match=r"tokenizer\.json: file not found, and no tokenizer\.model"):
        Tokenizer.from_pretrained(tmp_path / "empty")
    unigram = spm_files.edited(spm_files.mistral_proto(), lambda p: setattr(p.trainer_spec, "model_type", 1))
    with pytest.raises(UnsupportedError, match=r"tokenizer\.model: a UNIGRAM SentencePiece model"):
        Tokenizer.from_pretrained(spm_files.write_dir(tmp_path / "unigram", unigram))
    tiktoken = spm_files.write_dir(tmp_path / "tiktoken", b"IQ== 0\nIg== 1\n")
    with pytest.raises(UnsupportedError, match=r"tokenizer\.model: a tiktoken-format file"):
        Tokenizer.from_pretrained(tiktoken)
    nfkc = spm_files.edited(spm_files.mistral_proto(), lambda p: setattr(p.normalizer_spec, "precompiled_charsmap",
                                                                       b"\x01\x02"))
    with pytest.raises(ModelDirError, match=r"tokenizer\.model: normalizer_spec\.precompiled_charsmap: .*corrupt"):
        Tokenizer.from_pretrained(spm_files.write_dir(tmp_path / "nfkc", nfkc))
