"""Diff section 2, tokenizer: vocabulary and merges, then both tokenizers on a corpus (the built-in multilingual
lines plus --text): the share of lines with identical ids and the first differing spans, as text and ids."""
from __future__ import annotations

from checks.diff.text import CORPUS, first_span
from checks.catalogue.registry import Problem, check

MAX_TEXT_LINES = 2000          # --text lines tokenized by both sides
SHOWN_SPANS = 5


def corpus_lines(ctx) -> list[str]:
    lines = list(CORPUS)
    if ctx.text:
        lines += [line for line in ctx.text.splitlines() if line.strip()][:MAX_TEXT_LINES]
    return lines


def _merges(tok) -> set | None:
    merges = getattr(tok.model, "merges", None)
    if merges is None:
        return None
    return set(merges.keys() if isinstance(merges, dict) else map(tuple, merges))


@check("DIF010", category="diff", severity="warning", needs=("pair",),
       hint="Use the reference's tokenizer files with the candidate (a GGUF carries its own vocab and merges).")
def vocab_differs(ctx):
    """The vocabularies or the BPE merges differ (tokens only on one side, a token under another id).

    The embedding rows are indexed by id: a token that moved id feeds the model another token's embedding,
    and a missing merge splits common words into more pieces than the model was trained on."""
    a, b = ctx.ref.tokenizer.get_vocab(), ctx.cand.tokenizer.get_vocab()
    only_a = sorted(set(a) - set(b), key=a.get)
    only_b = sorted(set(b) - set(a), key=b.get)
    moved = sorted((t for t in set(a) & set(b) if a[t] != b[t]), key=a.get)
    if only_a or only_b:
        yield Problem(f"vocabularies differ: {len(only_a)} tokens only in the reference, {len(only_b)} only in the "
                      f"candidate ({len(a)} vs {len(b)})",
                      evidence={"reference_size": len(a), "candidate_size": len(b),
                                "only_reference": [[t, a[t]] for t in only_a[:20]],
                                "only_candidate": [[t, b[t]] for t in only_b[:20]]})
    if moved:
        yield Problem(f"{len(moved)} tokens have another id in the candidate (first: {moved[0]!r} "
                      f"{a[moved[0]]} -> {b[moved[0]]})",
                      evidence={"moved": [[t, a[t], b[t]] for t in moved[:20]], "count": len(moved)})
    ma, mb = _merges(ctx.ref.tokenizer), _merges(ctx.cand.tokenizer)
    if ma is not None and mb is not None and ma != mb:
        yield Problem(f"BPE merges differ: {len(ma - mb)} only in the reference, {len(mb - ma)} only in the "
                      f"candidate ({len(ma)} vs {len(mb)})",
                      evidence={"only_reference": [list(m) for m in sorted(ma - mb)[:10]],
                                "only_candidate": [list(m) for m in sorted(mb - ma)[:10]]})


@check("DIF011", category="diff", severity="warning", needs=("pair",),
       hint="Tokenize with the reference's tokenizer, or fix the candidate's pre-tokenizer/normalizer/merges.")
def tokenization_differs(ctx):
    """Both tokenizers encode a corpus line to different ids (the first differing spans shown).

    The built-in corpus covers scripts, digits, code, whitespace runs, emoji and special-looking text, where
    converted tokenizers (a pre-tokenizer regex, a normalizer, byte fallback) usually part ways; --text FILE
    adds your own lines. Reported: the share of lines with identical ids and, per differing line, the first
    span as text with both id sequences."""
    tok_a, tok_b = ctx.ref.tokenizer, ctx.cand.tokenizer
    lines = corpus_lines(ctx)
    spans, same = [], 0
    for line in lines:
        ids_a = tok_a.encode(line, add_special_tokens=False)
        ids_b = tok_b.encode(line, add_special_tokens=False)
        if ids_a == ids_b:
            same += 1
            continue
        span = first_span(ids_a, ids_b, tok_a.decode, tok_b.decode, pad=1)
        spans.append({"line": line[:200], "reference_text": span.ref_text, "candidate_text": span.cand_text,
                      "reference_ids": span.ref_ids[:16], "candidate_ids": span.cand_ids[:16],
                      "at": [span.start_ref, span.start_cand]})
    share = same / len(lines)
    if not spans:
        yield Problem(f"all {len(lines)} corpus lines tokenize to identical ids (100% identical)", severity="info",
                      evidence={"lines": len(lines), "identical": same, "identical_share": share})
        return
    first = spans[0]
    yield Problem(f"{len(lines) - same} of {len(lines)} corpus lines tokenize differently ({100 * share:.1f}% "
                  f"identical); first: {first['reference_text']!r} -> {first['reference_ids']} vs "
                  f"{first['candidate_text']!r} -> {first['candidate_ids']}",
                  evidence={"lines": len(lines), "identical": same, "identical_share": share,
                            "spans": spans[:SHOWN_SPANS]})
