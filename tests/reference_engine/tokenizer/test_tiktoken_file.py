"""tiktoken-format files and tekken.json read by hand agree with their own libraries: tiktoken's
load_tiktoken_bpe and mistral-common's Tekkenizer (ids, bytes, special tokens); malformed files are one line."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.sources.tiktoken_file import looks_like_tiktoken, read_tekken, read_tiktoken
from tests.checks.zoo_sources import tiktoken_export

TEKKEN = "tekken_240718.json"


def mistral_data() -> Path:
    import mistral_common
    return Path(mistral_common.__file__).parent / "data"


@pytest.mark.assets
def test_tiktoken_file_equals_tiktoken(smollm2_dir, tmp_path):
    from tiktoken.load import load_tiktoken_bpe

    path = tmp_path / "tokenizer.model"
    path.write_text(tiktoken_export(smollm2_dir / "tokenizer.json"), encoding="utf-8")
    assert looks_like_tiktoken(path)
    ours = read_tiktoken(path)
    reference = load_tiktoken_bpe(str(path))
    assert {token: rank for rank, token in ours.tokens.items()} == reference


def test_tekken_ids_equal_mistral_common(tmp_path):
    from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    raw = json.loads((mistral_data() / TEKKEN).read_text(encoding="utf-8"))
    raw["vocab"] = raw["vocab"][:3000]    # the real file's head: mistral-common reads it in a second, not a minute
    raw["config"].update(num_vocab_tokens=3000, default_vocab_size=4000)
    path = tmp_path / "tekken.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    ours, reference = read_tekken(path), Tekkenizer.from_file(path)
    assert reference.n_words == len(ours.tokens) + len(ours.specials) == 4000
    keep = SpecialTokenPolicy.KEEP
    for i in range(reference.n_words):
        expected = reference.id_to_byte_piece(i, special_token_policy=keep)
        assert (ours.specials[i].encode() if i in ours.specials else ours.tokens[i]) == expected, i
    assert ours.pattern == raw["config"]["pattern"]


@pytest.mark.parametrize("content, match", [
    (b"", "no tokens"),
    (b"IQ== 0\nnot base64! 1\n", "line 2"),
    (b"IQ== 0\nIQ== 1\n", "appears twice"),
    (b"IQ== x\n", "line 1 is not"),
])
def test_bad_tiktoken_files(tmp_path, content, match):
    path = tmp_path / "bpe.tiktoken"
    path.write_bytes(content)
    with pytest.raises(ModelDirError, match=match) as e:
        read_tiktoken(path)
    assert str(e.value).startswith(str(path))


@pytest.mark.parametrize("raw, match", [
    ("[]", "not a tekken.json"),
    ('{"config": {}, "vocab": [{"rank": 5, "token_bytes": "IQ=="}]}', "out-of-range rank"),
    ('{"config": {"default_num_special_tokens": 0}, "vocab": [{"rank": 0, "token_bytes": "@@"}], '
     '"special_tokens": []}', "not base64"),
    ('{"config": {"default_vocab_size": -1}, "vocab": []}', "not a token count"),
    ("{not json", "not valid JSON"),
])
def test_bad_tekken_files(tmp_path, raw, match):
    path = tmp_path / "tekken.json"
    path.write_text(raw, encoding="utf-8")
    with pytest.raises(ModelDirError, match=match):
        read_tekken(path)


def test_tiktoken_sniffing(tmp_path):
    good, bad = tmp_path / "a", tmp_path / "b"
    good.write_text(f"{base64.b64encode(b'hello').decode()} 0\n", encoding="utf-8")
    bad.write_bytes(b"\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02")   # a SentencePiece model's first bytes
    assert looks_like_tiktoken(good) and not looks_like_tiktoken(bad)
