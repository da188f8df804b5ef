"""tests/oracle_cache.py gives an oracle's answer again only for the same bytes, question and parameters."""
from __future__ import annotations

import torch

from tests import oracle_cache


def asker(log: list):
    def ask():
        log.append(1)
        return {"logits": torch.arange(6.0).reshape(2, 3), "ids": [1, 2, 3], "loss": 0.25}
    return ask


def test_same_bytes_are_asked_once_and_any_change_asks_again(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMDOCTOR_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\x00" * 64)
    log: list = []
    first = oracle_cache.answer("q", [model], {"texts": ["a"]}, asker(log))
    again = oracle_cache.answer("q", [model], {"texts": ["a"]}, asker(log))
    assert len(log) == 1
    # the same stored bytes read back (safetensors), no arithmetic on either side: bit-identity is the claim
    assert torch.equal(first["logits"], again["logits"]) and again["ids"] == [1, 2, 3] and again["loss"] == 0.25
    oracle_cache.answer("q", [model], {"texts": ["b"]}, asker(log))                 # another parameter
    oracle_cache.answer("other", [model], {"texts": ["a"]}, asker(log))             # another question
    (model / "weights.bin").write_bytes(b"\x00" * 63 + b"\x01")                     # one byte changed
    oracle_cache.answer("q", [model], {"texts": ["a"]}, asker(log))
    assert len(log) == 4
    monkeypatch.setenv("LLMDOCTOR_ORACLE_CACHE", "0")
    oracle_cache.answer("q", [model], {"texts": ["a"]}, asker(log))
    assert len(log) == 5


def test_a_kept_file_is_a_copy_a_test_may_edit(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMDOCTOR_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "in.txt"
    source.write_text("hf")
    made: list = []

    def make(out):
        def write():
            made.append(1)
            out.write_text("converted")
        return write
    out = tmp_path / "a.gguf"
    oracle_cache.file_answer("converted", [source], {}, out, make(out))
    out.write_text("edited by a test")
    second = tmp_path / "b.gguf"
    oracle_cache.file_answer("converted", [source], {}, second, make(second))
    assert made == [1] and second.read_text() == "converted"
