"""The competence probes: scores from log-probs against hand computations, the built-in text and the copy
sequence as real tokenizers (SmolLM2's English BPE, Gemma 3's multilingual SentencePiece-style BPE, the demo's)
read them, and the bounds' edges."""
from __future__ import annotations

import math

import pytest
import torch

from llmdoctor.cli import DEMO_MODEL
from probes.competence import (COPY_LENGTH, MAX_COPY_RATIO, PARTS, builtin_parts, copy_prompt, copy_score,
                               judge_copy, judge_text, mean_loss, text_prompt, token_logprobs, unigram_loss)
from probes.competence.corpus import QUICK_TOKENS
from reference_engine.tokenizer import Tokenizer


def test_token_logprobs_match_log_softmax_and_nonfinite_rows_score_minus_inf():
    logits = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 0.0], [float("nan"), 0.0, 0.0]])
    lp = token_logprobs(logits, [0, 2, 0, 1])
    assert lp[0] == pytest.approx(float(torch.log_softmax(logits[0], -1)[2]))
    assert lp[1] == pytest.approx(float(torch.log_softmax(logits[1], -1)[0]))
    assert lp[2] == -math.inf
    assert mean_loss(lp) == math.inf and math.isnan(mean_loss([]))
    assert mean_loss([-1.0, -3.0]) == pytest.approx(2.0)


def test_unigram_loss_is_the_entropy_of_the_token_counts():
    assert unigram_loss([5, 5, 5, 5]) == 0.0
    assert unigram_loss([1, 2, 3, 4]) == pytest.approx(math.log(4))
    assert unigram_loss([1, 1, 2, 3]) == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))


def test_copy_score_compares_the_two_copies_without_their_first_tokens():
    # prefix of 1, copies of 4: log-probs index i scores token i + 1
    lp = [-9.0, -2.0, -2.0, -2.0, -9.0, -0.5, -0.5, -0.5]
    score = copy_score(lp, start=1, length=4)
    assert (score.first, score.second, score.ratio) == (2.0, 0.5, 0.25)
    assert judge_copy(score.ratio).ok and not judge_copy(MAX_COPY_RATIO).ok and not judge_copy(math.nan).ok


def test_text_bound_is_the_smaller_of_a_fraction_of_ln_v_and_the_unigram_loss():
    assert judge_text(3.0, 50000, 5.0).ok
    assert not judge_text(5.0, 50000, 5.0).ok                 # no better than its own unigram model
    assert not judge_text(4.2, 1000, 9.0).ok                  # 0.6 ln 1000 = 4.14
    assert not judge_text(math.inf, 50000, 5.0).ok and "ln V = 10.82" in judge_text(3.0, 50000, 5.0).why


def test_builtin_text_ships_every_part():
    parts = builtin_parts()
    assert [p.name for p in parts] == list(PARTS) and sum(len(p.text) for p in parts) > 4000


@pytest.fixture(scope="module")
def tokenizers(smollm2_dir, gemma3_270m_dir):
    return {"smollm2": Tokenizer.from_pretrained(smollm2_dir), "gemma3": Tokenizer.from_pretrained(gemma3_270m_dir),
            "demo": Tokenizer.from_pretrained(DEMO_MODEL)}


def test_the_tokenizer_decides_which_parts_apply(tokenizers):
    smol, gemma, demo = (text_prompt(tokenizers[k], quick=True) for k in ("smollm2", "gemma3", "demo"))
    assert set(smol.skipped) == {"prose_zh", "prose_ja"}           # an English BPE spells CJK byte by byte
    assert gemma.skipped == {} and set(gemma.parts) == set(PARTS)   # Gemma's vocabulary knows every script
    assert {"prose_ru", "prose_zh", "prose_ja"} <= set(demo.skipped) and "prose_en" in demo.parts
    for prompt, tok in ((smol, tokenizers["smollm2"]), (gemma, tokenizers["gemma3"])):
        assert len(prompt.ids) <= QUICK_TOKENS + 1
        for span in prompt.spans:     # each span is the start of its part
            part = next(p for p in builtin_parts() if p.name == span.name)
            assert part.text.strip().startswith(tok.decode(list(prompt.ids[span.start:span.end])).strip()[:20])
    assert gemma.ids[0] == tokenizers["gemma3"].bos_token_id and smol.ids[0] != tokenizers["smollm2"].bos_token_id


def test_text_is_cut_to_the_models_context(tokenizers):
    prompt = text_prompt(tokenizers["smollm2"], quick=False, max_tokens=100)
    assert len(prompt.ids) <= 100 and prompt.spans


@pytest.mark.parametrize("name", ["smollm2", "gemma3", "demo"])
def test_copy_prompt_is_two_identical_copies_of_ordinary_tokens_that_round_trip(tokenizers, name):
    tok = tokenizers[name]
    cp = copy_prompt(tok, len(tok))
    assert cp is not None and cp.length == COPY_LENGTH
    first = cp.ids[cp.start:cp.start + cp.length]
    assert first == cp.ids[cp.start + cp.length:] and len(set(first)) == COPY_LENGTH
    assert not set(first) & set(tok.all_special_ids)
    assert cp == copy_prompt(tok, len(tok))                        # fixed seed: every run sees the same
    if name != "demo":
        assert cp.round_trips
