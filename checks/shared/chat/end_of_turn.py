"""The one end-of-turn detector: the special token a chat template writes right after an assistant answer
(<|im_end|>, <|eot_id|>, <end_of_turn>). Generation stops only if that token is an EOS/EOT id, so the static
GGUF check (GGF004) and the live-server checks (EPT021/EPT022) must agree on which token it is."""
from __future__ import annotations

# distinctive texts, so finding the answer in the rendered conversation cannot hit template boilerplate
PROBE_USER, PROBE_ANSWER = "Qx7 probe question", "Zy9 probe answer"
PROBE_TURN = [{"role": "user", "content": PROBE_USER}, {"role": "assistant", "content": PROBE_ANSWER}]
LOOKAHEAD_IDS = 4        # a template may put a space or a newline before its end-of-turn token


def end_of_turn(tokenizer) -> tuple[int, str] | None:
    """(id, text) of the first special or added token within LOOKAHEAD_IDS ids after the assistant answer of a
    one-turn conversation, or None (no template, a template that refuses the conversation, no such token)."""
    try:
        text = tokenizer.apply_chat_template(PROBE_TURN, add_generation_prompt=False)
    except Exception:  # no template, or one that raises on this shape (templates are arbitrary jinja)
        return None
    at = text.find(PROBE_ANSWER)
    if at < 0:
        return None
    special = set(tokenizer.all_special_ids)
    for token_id in tokenizer.encode(text[at + len(PROBE_ANSWER):], add_special_tokens=False)[:LOOKAHEAD_IDS]:
        if token_id in special or token_id in tokenizer.added_by_id:
            return token_id, tokenizer.decode([token_id])
    return None
