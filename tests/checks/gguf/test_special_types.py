"""Turn tokens typed as text (llama.cpp#27683): GGF036 on a GGUF whose tokenizer.ggml.token_type marks
<|im_start|> or <|im_end|> NORMAL (the tiny conversion edited with gguf-py; llama.cpp itself then tokenizes the
template's '<|im_start|>' as several pieces), TOK034 on a tokenizer.json that lists <|im_end|> with "special":
false. The conversion as llama.cpp's converter wrote it and SmolLM2's own files are quiet. About a second each."""
from __future__ import annotations

import json
import shutil

import pytest
from gguf import GGUFValueType

from llmdoctor.run.runner import run_checks
from reference_engine.files.gguf_file import GGUFFile
from reference_engine.tokenizer.models.pieces import NORMAL
from tests.checks.conftest import no_crashes
from tests.checks.gguf.converted import tiny_conversion
from tests.checks.gguf.edited import edited_gguf

IM_START, IM_END = 1, 2     # SmolLM2's turn start (written by its template) and turn end (its EOS)


def _findings(path, check_id) -> list[str]:
    report = run_checks(path, select=[check_id])
    no_crashes(report)
    return [f.message for f in report.findings if f.check == check_id and f.severity.value in ("warning", "error")]


def _typed_normal(tmp_path, token_id: int):
    _, gguf = tiny_conversion()
    types = list(GGUFFile.open(gguf).get("tokenizer.ggml.token_type"))
    types[token_id] = NORMAL
    return edited_gguf(gguf, tmp_path / f"id{token_id}-normal.gguf",
                       {"tokenizer.ggml.token_type": (types, GGUFValueType.ARRAY, GGUFValueType.INT32)})


def _llama_cpp_ids(path, text: str) -> list[int]:
    from llama_cpp import Llama
    model = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        return model.tokenize(text.encode(), add_bos=False, special=True)
    finally:
        model.close()


@pytest.mark.assets
def test_turn_marker_typed_normal_in_the_gguf_is_named(tmp_path):
    broken = _typed_normal(tmp_path, IM_START)
    found = _findings(broken, "GGF036")
    assert any(m.startswith("'<|im_start|>' (id 1, written by the chat template) is typed NORMAL") for m in found), \
        found
    # what the finding says llama.cpp does: the template's marker reaches the model as pieces
    assert len(_llama_cpp_ids(broken, "<|im_start|>")) > 1


@pytest.mark.assets
def test_eos_typed_normal_in_the_gguf_is_named(tmp_path):
    # llama.cpp retypes a few well-known turn ends (<|im_end|> among them) with a warning; other readers do not
    found = _findings(_typed_normal(tmp_path, IM_END), "GGF036")
    assert any(m.startswith("'<|im_end|>' (id 2, tokenizer.ggml.eos_token_id) is typed NORMAL") for m in found), found


@pytest.mark.assets
def test_turn_end_typed_control_by_the_converter_is_quiet():
    _, gguf = tiny_conversion()
    assert _findings(gguf, "GGF036") == []
    assert _llama_cpp_ids(gguf, "<|im_start|>") == [IM_START]


def _tokenizer_dir(tmp_path, special: bool):
    hf, _ = tiny_conversion()
    out = tmp_path / ("special" if special else "not-special")
    out.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        shutil.copy(hf / name, out / name)
    tok = json.loads((hf / "tokenizer.json").read_text())
    for added in tok["added_tokens"]:
        if added["id"] == IM_END:
            added["special"] = special
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


@pytest.mark.assets
def test_turn_end_not_special_in_tokenizer_json_is_named(tmp_path):
    found = _findings(_tokenizer_dir(tmp_path, special=False), "TOK034")
    assert any(m.startswith("'<|im_end|>' (id 2, the EOS) is listed with \"special\": false") for m in found), found


@pytest.mark.assets
def test_turn_end_special_in_tokenizer_json_is_quiet(tmp_path, smollm2_dir):
    assert _findings(_tokenizer_dir(tmp_path, special=True), "TOK034") == []
    assert _findings(smollm2_dir, "TOK034") == []
