"""Competence probes: measurements that tell a model that talks nonsense without a second model.
No judgment of a run is made here beyond the calibrated bounds; the engine checks (checks/competence/) and the
endpoint checks (checks/endpoint/) feed them log-probabilities from wherever they get them.

- corpus.py: the built-in text (package data) and which parts a tokenizer can be held to
  (`text_prompt(tokenizer, quick, max_tokens) -> TextPrompt`: ids, the parts' spans, the parts left out).
- copy_sequence.py: `copy_prompt(tokenizer, vocab_size) -> CopyPrompt` (a random sequence of ordinary tokens,
  twice).
- scores.py: `token_logprobs(logits, ids)`, `mean_loss(logprobs)`, `unigram_loss(ids)`,
  `copy_score(logprobs, start, length) -> CopyScore`.
- bounds.py: `judge_text(loss, vocab_size, unigram)`, `judge_copy(ratio) -> Verdict`, and why the bounds hold.
"""
from probes.competence.bounds import (MAX_COPY_RATIO, MAX_LOSS_FRACTION, MAX_UNIGRAM_FRACTION, Verdict,
                                      judge_copy, judge_text, text_bound)
from probes.competence.copy_sequence import COPY_LENGTH, CopyPrompt, copy_prompt, ordinary_tokens
from probes.competence.corpus import PARTS, Span, TextPart, TextPrompt, builtin_parts, encode_part, text_prompt
from probes.competence.scores import CopyScore, copy_score, mean_loss, token_logprobs, unigram_loss

__all__ = ["MAX_COPY_RATIO", "MAX_LOSS_FRACTION", "MAX_UNIGRAM_FRACTION", "Verdict", "judge_copy", "judge_text",
           "text_bound", "COPY_LENGTH", "CopyPrompt", "copy_prompt", "ordinary_tokens", "PARTS", "Span",
           "TextPart", "TextPrompt", "builtin_parts", "encode_part", "text_prompt", "CopyScore", "copy_score",
           "mean_loss", "token_logprobs", "unigram_loss"]
