"""The distance prompt's layout (probes/competence/distance.py) with SmolLM2's tokenizer: each pair is one
sequence twice at its distance, the passages are never in the filler and read the same near, the prompt fits
the tokens asked for; scores go through the one copy_score. Tokenizer only: well under a second."""
from __future__ import annotations

import pytest

from probes.competence.distance import (COPY_LENGTH, NEAR_DISTANCE, PAD_TOKENS, distance_prompt, distance_score,
                                         reach)
from reference_engine.tokenizer import Tokenizer


pytestmark = pytest.mark.assets


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    return Tokenizer.from_pretrained(smollm2_dir)


@pytest.mark.parametrize("tokens", [512, 1024, 4096])
def test_layout(tokenizer, tokens):
    p = distance_prompt(tokenizer, 49152, tokens)
    assert p is not None and len(p.ids) <= tokens
    ids = p.ids
    for pair in p.pairs:
        assert ids[pair.first:pair.first + COPY_LENGTH] == ids[pair.second:pair.second + COPY_LENGTH]
    assert p.pairs[0].distance == NEAR_DISTANCE
    distances = [pair.distance for pair in p.pairs]
    assert distances == sorted(distances) and distances[-1] > 0.75 * tokens - 200
    seqs = [set(ids[q.first:q.first + COPY_LENGTH]) for q in p.pairs]
    assert all(not (a & b) for i, a in enumerate(seqs) for b in seqs[i + 1:])          # disjoint sequences
    for s in p.passages:
        assert ids[s.start - PAD_TOKENS:s.end] == p.near[s.near_start - PAD_TOKENS:s.near_end]
        text = ids[s.start:s.end]
        rest = ids[:s.start - PAD_TOKENS]
        assert not any(rest[i:i + len(text)] == text for i in range(len(rest) - len(text) + 1))


def test_scores_read_the_right_spans(tokenizer):
    p = distance_prompt(tokenizer, 49152, 1024)
    perfect = [0.0 if any(q.second <= i + 1 < q.second + COPY_LENGTH for q in p.pairs) else -5.0
               for i in range(len(p.ids) - 1)]
    near = [-5.0] * (len(p.near) - 1)
    score = distance_score(p, perfect, near)
    assert [c.ratio for c in score.copies] == [0.0] * len(p.pairs)
    assert score.far_loss == score.near_loss == tuple(5.0 for _ in p.passages)


def test_too_short_a_context_gives_none(tokenizer):
    assert distance_prompt(tokenizer, 49152, 200) is None


def test_reach_is_the_last_distance_read_before_the_first_miss():
    assert reach([(64, True), (256, True), (1024, False), (4096, True)]) == (256, 1024)
    assert reach([(64, True), (256, True)]) == (256, None)
    assert reach([(64, False)]) == (0, 64)
