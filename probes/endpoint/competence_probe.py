"""The competence probes through a server's API: what the server says about the built-in text, a
copied word sequence and a few greedy continuations. Measurements only; checks/endpoint/competence.py judges.

Two routes, by what the server offers (probes/endpoint/prompt_logprobs.py):
- prompt logprobs (vLLM, TGI, llama-cpp-python, OpenAI echo): the loss on each part of the built-in text and on
  both copies of the copy sequence, exactly as the engine side measures them (probes/competence/scores.py);
- generated tokens only (llama.cpp, Ollama): the copy sequence shown once and then begun again, and the greedy
  continuation compared word by word with the rest of the sequence (induction, from the text alone), with the
  logprobs of the copied tokens when the server returns them.
No tokenizer is needed: the copy sequence is made of words (the server's tokenizer cuts them as it likes) and a
part of the built-in text counts when the server's tokens spell it back at the corpus's characters-per-token rate.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import regex

from probes.competence.copy_sequence import COPY_LENGTH, SEED
from probes.competence.corpus import MIN_CHARS_PER_TOKEN, TextPart, builtin_parts
from probes.endpoint.prompt_logprobs import ScoredPrompt, served_text_logprobs

WORD = regex.compile(r"\b[a-z]{4,}\b")
COPY_SOURCE = "prose_en"          # the words of the copy sequence come from this part of the built-in text
SHOWN_WORDS = COPY_LENGTH // 2    # generated route: the second copy is begun with this many words


@dataclass
class PartScore:
    """One part of the built-in text as the server scored it (logprobs: the tokens after the first)."""
    name: str
    tokens: list[str]
    logprobs: list[float]
    chars_per_token: float
    route: str


@dataclass
class CopyRun:
    """The copy sequence through the prompt-logprob route: `start`/`length` index the two copies in logprobs
    the way probes.competence.scores.copy_score reads them (logprobs[i] scores token i + 1)."""
    scored: ScoredPrompt
    logprobs: list[float]
    start: int
    length: int


@dataclass
class GreedyCopy:
    """The copy sequence shown once and begun again; the server's greedy continuation vs the words that follow."""
    prompt: str
    expected: list[str]
    generated: str
    matched: int                                   # leading words of the continuation equal to `expected`
    copied_logprobs: list[float] = field(default_factory=list)   # of the generated tokens before the first miss
    route: str = ""

    @property
    def accuracy(self) -> float:
        return self.matched / len(self.expected)


def copy_words(parts: list[TextPart] | None = None, length: int = COPY_LENGTH, seed: int = SEED) -> list[str]:
    """`length` distinct words of 4+ letters from the English prose, in a seeded random order (no sentence)."""
    source = next(p.text for p in parts or builtin_parts() if p.name == COPY_SOURCE)
    pool = sorted(set(WORD.findall(source)))
    return random.Random(seed).sample(pool, min(length, len(pool)))


def copy_text(words: list[str]) -> str:
    return "".join(" " + w for w in words)


# -- prompt-logprob route -----------------------------------------------------------------------------------------
def score_part(surface, part: TextPart, prefix: str = "",
               chars_per_token: float | None = None) -> tuple[PartScore | None, str]:
    """(the part's scores, "") or (None, why it does not apply). A part the server could not tokenize beforehand
    (chars_per_token None) is held to the corpus's rate here, on the tokens it echoes."""
    scored = served_text_logprobs(surface, part.text, prefix)
    first = scored.text_start(part.text)
    if first is None:
        return None, "the server's tokens do not spell the text back"
    values = scored.logprobs[first:]
    if values and values[0] is None:                               # nothing before it, or the OpenAI echo rule
        values = values[1:]
    if not values or any(v is None for v in values):
        return None, "the server left some of the text's tokens without a logprob"
    rate = chars_per_token or len(part.text) / (len(scored.tokens) - first)
    if rate < MIN_CHARS_PER_TOKEN:
        return None, f"{rate:.2f} characters per token: the served vocabulary does not know this script"
    return PartScore(part.name, scored.tokens[first:], [float(v) for v in values], rate, scored.route), ""


def served_copy(surface, words: list[str], prefix: str = "") -> tuple[CopyRun | None, str]:
    """The two copies through the prompt-logprob route, or (None, why not) when the tokens cannot be split into
    two equal copies (a tokenizer that merges across the copies' boundary)."""
    one = copy_text(words)
    scored = served_text_logprobs(surface, one + one, prefix)
    ends = scored.ends(one + one)
    if ends is None:
        return None, "the server's tokens do not spell the copy sequence back"
    first = scored.text_start(one + one)
    middle = next((i for i, e in enumerate(ends) if e == len(one)), None)
    if middle is None or scored.tokens[first:middle + 1] != scored.tokens[middle + 1:]:
        return None, "the server tokenizes the two copies differently"
    values = scored.logprobs[1:]      # values[i] scores token i + 1
    if any(v is None for v in values[first:]):
        return None, "the server left some copied tokens without a logprob"
    logprobs = [float(v) if v is not None else 0.0 for v in values]
    return CopyRun(scored, logprobs, first, middle + 1 - first), ""


# -- generated-token route ----------------------------------------------------------------------------------------
def greedy_copy_prompt(words: list[str]) -> tuple[str, list[str]]:
    """(the prompt: the sequence twice, then its first SHOWN_WORDS words; the words that should follow)."""
    return copy_text(words) * 2 + copy_text(words[:SHOWN_WORDS]), words[SHOWN_WORDS:]


def matched_words(expected: list[str], text: str) -> int:
    matched = 0
    for want, have in zip(expected, text.split()):
        if want != have:
            break
        matched += 1
    return matched


def greedy_copy(surface, words: list[str], top_logprobs: int = 1) -> GreedyCopy:
    """Show the sequence twice, begin it a third time, and read the greedy continuation (a second showing makes
    small models copy reliably; one showing leaves them drifting after a few words)."""
    prompt, expected = greedy_copy_prompt(words)
    answer = surface.completion(prompt, max_tokens=2 * len(expected), logprobs=top_logprobs)
    run = GreedyCopy(prompt, expected, answer.text, matched_words(expected, answer.text), route=answer.route)
    if answer.tokens:
        run.copied_logprobs = copied_logprobs(answer.tokens, copy_text(expected[:run.matched]))
    return run


def copied_logprobs(tokens, copied: str) -> list[float]:
    """Logprobs of the generated tokens that spell `copied` (the words the server copied correctly)."""
    out, text = [], ""
    for token in tokens:
        if len(text) >= len(copied) or token.logprob is None:
            break
        text += token.token
        out.append(float(token.logprob))
    return out


# -- well-known sequences (any route) -----------------------------------------------------------------------------
# (prompt, the word that comes next): counting, the alphabet, weekdays, months; any trained model continues them
SEQUENCES = (("1, 2, 3, 4, 5, 6,", "7"), ("10, 20, 30, 40, 50,", "60"), ("A, B, C, D, E, F,", "G"),
             ("one, two, three, four, five,", "six"), ("Monday, Tuesday, Wednesday, Thursday,", "Friday"),
             ("January, February, March, April,", "May"))
SEQUENCE_TOKENS = 8
PUNCT = regex.compile(r"^\p{P}+|\p{P}+$")


@dataclass
class Continued:
    prompt: str
    expected: str
    generated: str

    @property
    def ok(self) -> bool:
        words = self.generated.split()
        return bool(words) and PUNCT.sub("", words[0]) == self.expected

    @property
    def loops(self) -> bool:
        """The continuation repeats one or two words from its start ("piece in piece in ...")."""
        return short_loop(self.generated.split())


def short_loop(words: list[str], period: int = 2, least: int = 4) -> bool:
    return len(words) >= least and any(all(words[i] == words[i + p] for i in range(len(words) - p))
                                       for p in range(1, period + 1))


def continue_sequences(surface) -> list[Continued]:
    """The server's greedy continuation of each well-known sequence (one request each)."""
    return [Continued(prompt, expected, surface.completion(prompt, max_tokens=SEQUENCE_TOKENS).text)
            for prompt, expected in SEQUENCES]
