"""A live server read at distance (issue 40 ask 3): greedy retrieval of a planted word sequence behind
increasing amounts of the built-in text, through /v1/completions. Text in, text out, so the same prompts go to
any server and to the reference engine (checks/endpoint/context_reading.py) alike.

Each prompt: a lead of filler, the planted words shown twice (one showing leaves small models drifting, as the
competence probe found), `distance` tokens of filler (the other built-in parts, cycled), then the planted words
begun again (SHOWN_WORDS of them): a server that still reads that far continues them. A first request scores
the filler's characters per token (usage.prompt_tokens), so each prompt is sized in the server's own tokens;
every answer's usage.prompt_tokens is kept, to see a prompt cut short (a proxy, a context shift, num_ctx).
"""
from __future__ import annotations

from dataclasses import dataclass

from probes.competence.corpus import SEPARATOR, builtin_parts
from probes.competence.distance import FRACTIONS
from probes.endpoint.competence_probe import COPY_SOURCE, SHOWN_WORDS, copy_text, copy_words, matched_words

PLANTED_WORDS = 24           # SHOWN_WORDS begin the third showing, the rest are expected back
EXPECTED_WORDS = 4           # words read back from the greedy continuation
MIN_MATCHED = 3              # of them, in order from the first, for "still reads" (healthy: all 4)
NEAR_TOKENS = 64             # the near control's distance
LEFT_OUT = (COPY_SOURCE, "prose_ru", "prose_zh", "prose_ja")
CALIBRATION_CHARS = 1200     # filler sent once to learn the server's characters per token
ROOM = 0.85                  # of the tokens asked for: the largest prompt stays inside them when the filler's
                             # characters per token vary along it (CJK parts have fewer)


def filler_text() -> str:
    """The built-in Latin-script parts but the planted words' source, a blank line between (cycled by `take`).
    Scripts a tokenizer may spell byte by byte (Cyrillic, CJK) are left out: their characters per token differ
    from the rest by up to 8x, and the prompts are sized by one average."""
    return SEPARATOR.join(p.text.strip() for p in builtin_parts() if p.name not in LEFT_OUT) + SEPARATOR


def take(chars: int) -> str:
    text = filler_text()
    return (text * (chars // len(text) + 1))[:chars]


@dataclass(frozen=True)
class Retrieval:
    distance: int            # tokens of filler between the second showing and the cue (server tokens, estimated)
    prompt: str
    expected: list[str]      # the words that should come next


@dataclass
class Reading:
    distance: int
    matched: int             # expected words continued in order
    text: str                # the continuation
    prompt_tokens: int | None        # what the server (or the reference) counted
    error: str = ""          # the request failed (a context error names the limit)

    @property
    def reads(self) -> bool:
        return not self.error and self.matched >= MIN_MATCHED


def distances(tokens: int) -> list[int]:
    """The near control, then FRACTIONS of the tokens asked for (less the planted words and the cue)."""
    room = int(ROOM * tokens) - 2 * PLANTED_WORDS * 3 - 96
    return [NEAR_TOKENS] + sorted({int(room * f) for f in FRACTIONS if int(room * f) > 2 * NEAR_TOKENS})


def retrievals(tokens: int, chars_per_token: float) -> list[Retrieval]:
    """One prompt per distance, filler sized by the server's characters per token."""
    words = copy_words(length=PLANTED_WORDS)
    shown, expected = words[:SHOWN_WORDS], words[SHOWN_WORDS:SHOWN_WORDS + EXPECTED_WORDS]
    lead = take(200).rsplit(" ", 1)[0]
    out = []
    for d in distances(tokens):
        gap = take(int(d * chars_per_token)).rsplit(" ", 1)[0]
        planted = copy_text(words).strip()
        prompt = f"{lead}\n\n{planted}\n{planted}\n\n{gap}\n\n{copy_text(shown).strip()}"
        out.append(Retrieval(d, prompt, expected))
    return out


def chars_per_token(surface) -> float:
    """The filler's characters per token as the server counts them (one request of CALIBRATION_CHARS, short
    enough for any server's context; 4.0 when the server does not say)."""
    text = take(CALIBRATION_CHARS)
    answer = surface.completion(text, max_tokens=1)
    count = answer.prompt_tokens
    return len(text) / count if isinstance(count, int) and count > 0 else 4.0


def read_back(expected: list[str], continuation: str) -> int:
    return matched_words(expected, continuation.replace("\n", " "))
