"""A live server read at distance, by one of two routes, text in, so the same prompts go to any
server and to the reference engine (checks/endpoint/context_reading.py, context_echo.py) alike:

- echo (prompt logprobs: vLLM, TGI, llama-cpp-python; probes/endpoint/prompt_logprobs.py): the planted words
  shown once, `distance` tokens of filler, shown again; the server scores the prompt (one request per distance,
  nothing generated) and the copy score (probes.competence.scores.copy_score) divides the second showing's loss
  by the first's (the no-context level): a server that stops reading shows it rising to ~1 at a distance.
- greedy retrieval (servers without prompt logprobs: llama.cpp, Ollama), below.

Each prompt: a lead of filler, the planted words shown twice (one showing leaves small models drifting, as the
competence probe found), `distance` tokens of filler (the other built-in parts, cycled), then the planted words
begun again (SHOWN_WORDS of them): a server that still reads that far continues them. A first request scores
the filler's characters per token (usage.prompt_tokens), so each prompt is sized in the server's own tokens;
every answer's usage.prompt_tokens is kept, to see a prompt cut short (a proxy, a context shift, num_ctx).
"""
from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from probes.competence.bounds import judge_copy
from probes.competence.corpus import SEPARATOR, builtin_parts
from probes.competence.distance import FRACTIONS
from probes.competence.scores import CopyScore, copy_score
from probes.endpoint.competence_probe import COPY_SOURCE, SHOWN_WORDS, copy_text, copy_words, matched_words

PLANTED_WORDS = 24           # SHOWN_WORDS begin the third showing, the rest are expected back
EXPECTED_WORDS = 4           # words read back from the greedy continuation
MIN_MATCHED = 3              # of them, in order from the first, for "still reads" (healthy: all 4)
NEAR_TOKENS = 64             # the near control's distance
LEFT_OUT = (COPY_SOURCE, "prose_ru", "prose_zh", "prose_ja")
CALIBRATION_CHARS = 1200     # filler sent once to learn the server's characters per token
ROOM = 0.85                  # of the tokens asked for: the largest prompt stays inside them when the filler's
                             # characters per token vary along it (CJK parts have fewer)
GREEDY, ECHO = "greedy retrieval", "prompt logprobs (echo)"     # the two routes, as reports name them
MIN_COPY_TOKENS = 8          # tokens the two showings must share (cut alike) for a copy score
ECHO_LEAD_CHARS = 80         # filler before the first showing on the echo route (each echoed token costs time on
                             # llama-cpp-python: ~0.1 s in its Python logprob loop on a 2-core box)


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
    matched: int             # expected words continued in order (greedy route)
    text: str                # the continuation (greedy), or why no copy score (echo)
    prompt_tokens: int | None        # what the server (or the reference) counted
    error: str = ""          # the request failed (a context error names the limit)
    copy: CopyScore | None = None    # echo route: the planted words' second showing against their first
    route: str = GREEDY
    whole: bool | None = None        # echo route: the tokens echoed spell the prompt sent (None: not known)

    @property
    def reads(self) -> bool:
        if self.route == ECHO:
            return not self.error and self.copy is not None and judge_copy(self.copy.ratio).ok
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


# -- the echo route -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CopyPrompt:
    distance: int            # tokens of filler between the two showings (server tokens, estimated)
    prompt: str
    planted: str             # the words shown after the lead and again at the prompt's end


def copy_prompts(tokens: int, chars_per_token: float) -> list[CopyPrompt]:
    """One prompt per distance (the greedy route's distances): lead, the planted words, filler, the words again."""
    planted = copy_text(copy_words(length=PLANTED_WORDS)).strip()
    lead = take(ECHO_LEAD_CHARS).rsplit(" ", 1)[0]
    out = []
    for d in distances(tokens):
        gap = take(int(d * chars_per_token)).rsplit(" ", 1)[0].rstrip()
        out.append(CopyPrompt(d, f"{lead}\n\n{planted}\n\n{gap}\n\n{planted}", planted))
    return out


def copy_spans(pieces: list[str], planted: str) -> tuple[int, int, int] | None:
    """(first, second, length): token indices of the planted words' first and last showing in a prompt's tokens
    (`pieces`: each token's text, a BOS's included), over the tokens the two showings share after their first;
    None when the words do not stand there twice (a cut took one) or the showings share too few tokens."""
    ends = list(itertools.accumulate(len(p) for p in pieces))       # token i spans [ends[i-1], ends[i])
    text = "".join(pieces)
    at, last = text.find(planted), text.rfind(planted)
    if at < 0 or last <= at:
        return None
    spans = [(bisect.bisect_right(ends, c), bisect.bisect_left(ends, c + len(planted)) + 1) for c in (at, last)]
    (a, a_end), (b, b_end) = spans
    # the first token may hold what stands before the words (whitespace merged in); it is never scored
    length = 1 + next((k for k, (x, y) in enumerate(zip(pieces[a + 1:a_end], pieces[b + 1:b_end])) if x != y),
                      min(a_end - a, b_end - b) - 1)
    return (a, b, length) if length >= MIN_COPY_TOKENS else None


def pair_score(pieces: list[str], logprobs: list[float | None], planted: str) -> tuple[CopyScore | None, str]:
    """The copy score of the planted words' two showings, or (None, why not). logprobs[i] scores token i + 1
    (None where a server gives none: the first token)."""
    spans = copy_spans(pieces, planted)
    if spans is None:
        return None, "the planted words did not reach the model twice, cut alike"
    first, second, length = spans
    window = logprobs[first:first + length - 1] + logprobs[second:second + length - 1]
    if len(window) < 2 * (length - 1) or any(v is None for v in window):
        return None, "the planted words' tokens came back without logprobs"
    return copy_score([0.0 if v is None else float(v) for v in logprobs], first, length, second=second), ""


def echo_reading(prompt: CopyPrompt, scored) -> Reading:
    """A server's prompt logprobs (a ScoredPrompt) of one copy prompt, scored."""
    score, why = pair_score(scored.tokens, scored.logprobs[1:], prompt.planted)
    return Reading(prompt.distance, 0, why, scored.prompt_tokens, copy=score, route=ECHO,
                   whole=scored.text_start(prompt.prompt) is not None)
