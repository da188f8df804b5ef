"""Incremental detokenization: deltas never hold a broken character and concatenate to the full decode.

The decoders are the oracle's own (tokenizers' ByteLevel and SentencePiece byte_fallback decoders), fed
token sequences that split multi-byte characters at every possible byte boundary."""
import pytest
from hypothesis import given, settings, strategies as st
from tokenizers import decoders

from reference_engine.generate.detokenizer import IncrementalDetokenizer


def gpt2_bytes_to_unicode() -> dict[int, str]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_CHAR = gpt2_bytes_to_unicode()
BYTE_LEVEL = decoders.ByteLevel()
SENTENCEPIECE = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])


class Vocab:
    """Token strings by id, grown on demand, so any split of any text has ids."""

    def __init__(self):
        self.pieces: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, piece: str) -> int:
        if piece not in self.ids:
            self.ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self.ids[piece]


def byte_level_ids(data: bytes, cuts: list[int], vocab: Vocab) -> list[int]:
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [vocab.id("".join(BYTE_CHAR[b] for b in data[a:b])) for a, b in zip(bounds, bounds[1:]) if b > a]


def sentencepiece_ids(text: str, byte_chars: set[int], vocab: Vocab) -> list[int]:
    """Words as ▁-pieces; characters picked by hypothesis go out as <0xNN> byte tokens (byte_fallback)."""
    ids = []
    for i, ch in enumerate(text):
        if i in byte_chars or ord(ch) > 0x7F:
            ids += [vocab.id(f"<0x{b:02X}>") for b in ch.encode("utf-8")]
        else:
            ids.append(vocab.id("▁" if ch == " " else ch))
    return ids


def stream(ids, decode, stop=()):
    detok = IncrementalDetokenizer(decode, stop)
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.finish())
    return deltas, detok


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40) | \
    st.sampled_from(["中文字符", "emoji 😀🎉👩‍👩‍👧", "ü é ñ", "a😀b中c"])


@settings(max_examples=150, deadline=None)
@given(TEXT, st.lists(st.integers(0, 400), max_size=60))
def test_byte_level_split_characters(text, cuts):
    vocab = Vocab()
    ids = byte_level_ids(text.encode("utf-8"), cuts, vocab)
    decode = lambda seq: BYTE_LEVEL.decode([vocab.pieces[i] for i in seq])  # noqa: E731
    deltas, detok = stream(ids, decode)
    assert "".join(deltas) == decode(ids) == text
    assert all("\ufffd" not in d for d in deltas if "\ufffd" not in text)
    assert not detok.unstable


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=40), st.lists(st.integers(0, 100), max_size=30))
def test_byte_level_invalid_bytes_still_concatenate(data, cuts):
    """Forced ids that never form valid UTF-8: the deltas still add up to the decode, U+FFFD and all."""
    vocab = Vocab()
    ids = byte_level_ids(data, cuts, vocab)
    decode = lambda seq: BYTE_LEVEL.decode([vocab.pieces[i] for i in seq])  # noqa: E731
    deltas, _ = stream(ids, decode)
    assert "".join(deltas) == decode(ids)


@settings(max_examples=150, deadline=None)
@given(TEXT, st.sets(st.integers(0, 40)))
def test_sentencepiece_byte_fallback(text, byte_chars):
    vocab = Vocab()
    ids = sentencepiece_ids(text, byte_chars, vocab)
    decode = lambda seq: SENTENCEPIECE.decode([vocab.pieces[i] for i in seq])  # noqa: E731
    deltas, detok = stream(ids, decode)
    full = decode(ids)
    assert "".join(deltas) == full
    assert all("\ufffd" not in d for d in deltas if "\ufffd" not in full)
    assert not detok.unstable


def test_emoji_split_over_four_tokens_is_one_delta():
    vocab = Vocab()
    ids = byte_level_ids("a😀".encode("utf-8"), [1, 2, 3, 4], vocab)  # "a", then the 4 bytes one by one
    decode = lambda seq: BYTE_LEVEL.decode([vocab.pieces[i] for i in seq])  # noqa: E731
    deltas, _ = stream(ids, decode)
    assert deltas == ["a", "", "", "", "😀", ""]


def test_space_cleanup_does_not_break_the_stream():
    """A decoder that rewrites ' .' to '.' (clean_up_tokenization_spaces) once the '.' arrives."""
    pieces = ["Hello", " ", ".", " world", " ,", " !"]

    def decode(seq):
        return "".join(pieces[i] for i in seq).replace(" .", ".").replace(" ,", ",").replace(" !", "!")

    deltas, detok = stream(range(len(pieces)), decode)
    assert "".join(deltas) == decode(range(len(pieces))) == "Hello. world,!"
    assert not detok.unstable


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="ab中😀 ", max_size=30), st.text(alphabet="ab中😀 ", min_size=1, max_size=4),
       st.lists(st.integers(0, 200), max_size=40))
def test_stop_strings_across_token_boundaries(text, stop, cuts):
    vocab = Vocab()
    ids = byte_level_ids(text.encode("utf-8"), cuts, vocab)
    decode = lambda seq: BYTE_LEVEL.decode([vocab.pieces[i] for i in seq])  # noqa: E731
    deltas, detok = stream(ids, decode, stop=[stop, "zzz"])
    expected = text[:text.find(stop)] if stop in text else text
    assert "".join(deltas) == detok.text == expected
    assert detok.stopped_on == (stop if stop in text else None)
    # no delta ever showed the start of the stop string that was then cut
    assert all(stop not in d for d in deltas)


def test_stop_string_ends_pushes():
    pieces = ["Hel", "lo ##", "# more", " text"]
    detok = IncrementalDetokenizer(lambda seq: "".join(pieces[i] for i in seq), ["###"])
    out = [detok.push(i) for i in range(4)]
    assert "".join(out) + detok.finish() == "Hello " and detok.stopped_on == "###" and detok.finished


# ---------------------------------------------------------------------------------------------- real tokenizers

UNICODE = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)


def _stream_with(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    deltas, detok = stream(ids, lambda seq: tokenizer.decode(seq))
    assert "".join(deltas) == tokenizer.decode(ids)
    full = tokenizer.decode(ids)
    assert all("\ufffd" not in d for d in deltas if "\ufffd" not in full)
    assert not detok.unstable


@pytest.fixture(scope="module")
def factory_tokenizer():
    from reference_engine.tokenizer.tokenizer import Tokenizer
    from tests.reference_engine.generate.generate_models import model_dir
    return Tokenizer.from_pretrained(model_dir("llama"))


@settings(max_examples=80, deadline=None)
@given(UNICODE)
def test_random_unicode_through_our_byte_level_tokenizer(factory_tokenizer, text):
    _stream_with(factory_tokenizer, text)


@pytest.mark.assets
def test_random_unicode_through_a_byte_fallback_tokenizer(llamacpp_tokenizer_dir):
    from hypothesis import HealthCheck
    from reference_engine.tokenizer.tokenizer import Tokenizer
    tokenizer = Tokenizer.from_pretrained(llamacpp_tokenizer_dir("llama-spm"))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(UNICODE)
    def check(text):
        _stream_with(tokenizer, text)

    check()
