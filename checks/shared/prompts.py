"""Built-in probe prompts for the engine checks: a short set for --quick, a longer default set, and a chat
variant rendered with the model's own template when it has one.

Probes are plain English, code and digits (what every tokenizer in the field handles), short enough that a
1B model on a CPU answers them in well under a second each. `probe_inputs(ctx)` turns them into token ids
once per run (cached in ctx.state) so every engine check and the baseline see exactly the same inputs.
"""
from __future__ import annotations

from dataclasses import dataclass

from reference_engine.errors import ModelDirError

QUICK_PROBES = (
    "The capital of France is",
    "def add(a, b):\n    return",
)
DEFAULT_PROBES = QUICK_PROBES + (
    "Once upon a time, in a small village by the sea, there lived",
    "1, 2, 3, 4, 5, 6,",
    "Question: How many days are in a week?\nAnswer:",
    "Water boils at a temperature of",
)
CHAT_PROBE = [{"role": "user", "content": "What is the capital of France?"}]
# greedy steps per probe (generation, golden step 3, baseline continuations)
QUICK_NEW_TOKENS, DEFAULT_NEW_TOKENS = 12, 32


@dataclass(frozen=True)
class ProbeInput:
    label: str             # "probe 1" / "chat": how findings name it
    text: str              # what was encoded (the rendered template for the chat probe)
    ids: tuple[int, ...]   # token ids fed to the model (special tokens included)
    chat: bool = False


def probe_texts(quick: bool) -> tuple[str, ...]:
    return QUICK_PROBES if quick else DEFAULT_PROBES


def new_tokens(quick: bool) -> int:
    return QUICK_NEW_TOKENS if quick else DEFAULT_NEW_TOKENS


def render_chat(tok, messages=CHAT_PROBE) -> str | None:
    """The chat probe as the template renders it, or None (no template, or it does not render: TOK008)."""
    if not getattr(tok, "chat_template", None):
        return None
    try:
        return tok.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    except (ModelDirError, ValueError, TypeError):
        return None


def encode_probes(tok, texts, with_chat: bool = True) -> list[ProbeInput]:
    """Plain probes encoded with the tokenizer's special tokens (as `generate` does); the chat probe encoded
    without them (the template writes its own BOS). Probes that encode to nothing are dropped."""
    out = [ProbeInput(f"probe {i + 1}", text, tuple(tok.encode(text))) for i, text in enumerate(texts)]
    rendered = render_chat(tok) if with_chat else None
    if rendered is not None:
        out.append(ProbeInput("chat", rendered, tuple(tok.encode(rendered, add_special_tokens=False)), chat=True))
    return [p for p in out if p.ids]


def probe_inputs(ctx) -> list[ProbeInput]:
    """This run's probes (quick or default set, plus chat), encoded once and shared between checks."""
    key = ("probes", ctx.quick)
    if key not in ctx.state:
        vocab = ctx.engine.config.vocab_size
        try:
            probes = encode_probes(ctx.tokenizer, probe_texts(ctx.quick))
        except Exception as e:  # a tokenizer that cannot encode plain English is GLD001's finding
            from checks.catalogue.registry import Skip
            raise Skip(f"the probes cannot be encoded ({type(e).__name__}: {e}); see GLD001") from None
        # ids past the embedding are VOC002's finding; feeding them would only crash the forward pass
        ctx.state[key] = [p for p in probes if all(0 <= t < vocab for t in p.ids)]
    return ctx.state[key]
