"""Tokenizer.validate(): the seed's tokenizer invariants, checked on probe inputs.

Each broken invariant is one line naming the probe and what is wrong; [] means healthy. It never
raises: an exception inside a check becomes a line of its own.
"""
from __future__ import annotations

DEFAULT_PROBES = (
    "Hello, world!",
    "",
    " leading and trailing spaces ",
    "line one\nline two\ttabbed\r\n",
    "Numbers 1234567 and 3.14159",
    "日本語のテキストと中文字符",
    "emoji 😀 and ZWJ 👨\u200d👩\u200d👧",
    "def f(x):\n    return x ** 2  # code",
)


def validate(tok, probes=None, parts=None) -> list[str]:
    """Every invariant, or only the named `parts` (see PARTS): "batch" checks this package's own padding and
    position ids (it cannot fail because of a model's files), the others check the tokenizer files."""
    probes = list(DEFAULT_PROBES if probes is None else probes)
    problems: list[str] = []
    chosen = PARTS if parts is None else tuple(parts)
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown validate parts {unknown} (known: {', '.join(PARTS)})")
    for name, check in ((n, _CHECKS[n]) for n in PARTS if n in chosen):
        try:
            problems.extend(check(tok, probes))
        except Exception as e:  # validate() reports, never raises
            problems.append(f"{name} check raised {type(e).__name__}: {e}")
    return problems


def _check_batch(tok, probes) -> list[str]:
    """Per row: real-token count == mask sum, and positions run 0..n-1 over the real tokens."""
    if not probes:
        return []
    batch = tok(probes, padding=True)
    out = []
    for row, text in enumerate(probes):
        expected = tok.encode(text)
        mask = batch["attention_mask"][row].tolist()
        ids = batch["input_ids"][row].tolist()
        positions = batch["position_ids"][row].tolist()
        real = [i for i, m in zip(ids, mask) if m]
        if len(expected) != sum(mask):
            out.append(f"probe {text[:30]!r}: {len(expected)} tokens but attention_mask sums to {sum(mask)}")
        elif real != expected:
            out.append(f"probe {text[:30]!r}: batched ids differ from encode()")
        real_positions = [p for p, m in zip(positions, mask) if m]
        if real_positions != list(range(len(real_positions))):
            out.append(f"probe {text[:30]!r}: position_ids over real tokens are {real_positions[:8]}..., "
                       "not 0, 1, 2, ...")
    return out


def _check_ids(tok, probes) -> list[str]:
    size, out = len(tok), []
    for text in probes:
        bad = [i for i in tok.encode(text) if not 0 <= i < size or tok.id_to_token(i) is None]
        if bad:
            out.append(f"probe {text[:30]!r}: ids {bad[:5]} are outside the vocabulary (len {size})")
    return out


def _check_specials(tok, probes) -> list[str]:
    """The post-processor's prefix/suffix surround every encoding, and bos/eos tokens exist."""
    out = []
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        token = tok.special_token(name)
        if token is not None and tok.token_to_id(token) is None:
            out.append(f"{name} {token!r} is not in the vocabulary")
    template = tok.post_process([])
    for text in probes:
        plain, full = tok.encode(text, add_special_tokens=False), tok.encode(text)
        if len(full) != len(plain) + len(template) or [i for i in full if i not in template] != \
                [i for i in plain if i not in template]:
            out.append(f"probe {text[:30]!r}: special tokens are not where the post-processor template puts them")
    return out


def _check_round_trip(tok, probes) -> list[str]:
    """encode(decode(ids)) == ids; and decode(encode(s)) == s for lossless (byte-level) tokenizers."""
    out = []
    for text in probes:
        ids = tok.encode(text, add_special_tokens=False)
        decoded = tok.decode(ids)
        if tok.encode(decoded, add_special_tokens=False) != ids:
            out.append(f"probe {text[:30]!r}: encode(decode(ids)) != ids (unstable detokenization)")
        if tok.lossless and decoded != text:
            out.append(f"probe {text[:30]!r}: byte-level decode(encode(s)) gave {decoded[:30]!r}")
    return out


PARTS = ("batch", "ids", "special tokens", "round trip")
_CHECKS = {"batch": _check_batch, "ids": _check_ids, "special tokens": _check_specials,
           "round trip": _check_round_trip}


def chat_template_double_bos(tok) -> str | None:
    """A template that writes bos_token, encoded with add_special_tokens=True, starts with BOS twice.

    Not part of validate(): Llama-3's own files have this shape and are fine when the rendered prompt
    is encoded without special tokens (as apply_chat_template(tokenize=True) does). It is the
    pitfall behind double-BOS reports, so checks surface it as a warning. Returns the problem or None.
    """
    bos = tok.bos_token_id
    if not tok.chat_template or bos is None:
        return None
    try:
        prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    except Exception as e:
        return f"chat template does not render a one-message conversation: {e}"
    if tok.encode(prompt, add_special_tokens=True)[:2] == [bos, bos]:
        return "chat template writes bos_token and encode() adds another: tok(prompt) starts with BOS twice"
    return None
