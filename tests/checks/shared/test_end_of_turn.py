"""checks/shared/chat/end_of_turn.py: the one detector GGF004 and the endpoint checks share."""
from __future__ import annotations

import json

from checks.shared.chat.end_of_turn import end_of_turn
from reference_engine.testing.factory import IM_END, build_model_dir
from reference_engine.tokenizer.tokenizer import Tokenizer


def test_chatml_template_ends_turns_with_im_end(tmp_path):
    build_model_dir(tmp_path / "m", "llama")
    tok = Tokenizer.from_pretrained(tmp_path / "m")
    found = end_of_turn(tok)
    assert found is not None and found == (tok.token_to_id(IM_END), IM_END)


def test_no_template_or_no_special_token_is_none(tmp_path):
    build_model_dir(tmp_path / "m", "llama")
    config = tmp_path / "m" / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings["chat_template"] = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    config.write_text(json.dumps(settings))
    assert end_of_turn(Tokenizer.from_pretrained(tmp_path / "m")) is None
    settings.pop("chat_template")
    config.write_text(json.dumps(settings))
    assert end_of_turn(Tokenizer.from_pretrained(tmp_path / "m")) is None
