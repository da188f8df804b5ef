"""DIF072: how many tokens each server says the same prompts are (usage.prompt_tokens), as chat questions and
as plain completion prompts, and with --model the count the model's own tokenizer gives."""
from __future__ import annotations

from checks.diff.servers.requests import chat_messages
from checks.catalogue.registry import Problem, Skip, check
from probes.endpoint import EndpointError


def _completion_counts(ctx, text: str) -> tuple:
    return ctx.ask_both(f"count {text}", lambda side: side.surface.completion(text, max_tokens=1))


def _count(answer) -> int | None:
    return None if isinstance(answer, EndpointError) else answer.prompt_tokens


def _model_counts(tok, text: str) -> dict[str, int | None]:
    """The model's own counts: the chat prompt as its template renders it, the text with its special tokens."""
    try:
        chat = len(tok.encode(tok.apply_chat_template(chat_messages(text), add_generation_prompt=True),
                              add_special_tokens=False))
    except Exception:  # no template, or one that does not render: the chat row has no model count
        chat = None
    return {"chat": chat, "completion": len(tok.encode(text, add_special_tokens=True))}


def _rows(ctx) -> list[dict]:
    rows = []
    for text in ctx.prompts():
        model = _model_counts(ctx.tokenizer, text) if ctx.tokenizer is not None else {}
        for route, (ref, cand) in (("chat", ctx.greedy(text)), ("completion", _completion_counts(ctx, text))):
            rows.append({"prompt": text, "route": route, "reference": _count(ref), "candidate": _count(cand),
                         "model": model.get(route)})
    return rows


def _which(row: dict) -> str:
    if row["model"] is None:
        return ""
    agree = [side for side in ("reference", "candidate") if row[side] == row["model"]]
    return f"; the model's tokenizer says {row['model']} ({' and '.join(agree) or 'neither server'} agrees)"


@check("DIF072", category="diff", severity="warning", needs=("servers",),
       hint="A different count means a different prompt: another chat template, a BOS added twice or not at all, "
            "or another tokenizer (pre-tokenizer, vocabulary). --model DIR says which side counts like the model.")
def prompt_token_counts(ctx):
    """The servers count the same prompt differently (usage.prompt_tokens): they do not feed the model the same ids.

    Each probe prompt is counted as a chat question (the greedy request's usage) and as a plain completion prompt
    (a one-token request). A difference is a warning naming both counts; with --model DIR the model's own
    tokenizer counts too and the finding says which server agrees with it. Info when every count is equal."""
    rows = _rows(ctx)
    known = [r for r in rows if r["reference"] is not None and r["candidate"] is not None]
    if not known:
        raise Skip("neither route gave a prompt_tokens count on both servers")
    for row in known:
        if row["reference"] != row["candidate"]:
            yield Problem(f"{row['prompt'][:40]!r} ({row['route']}): reference counts {row['reference']} prompt "
                          f"tokens, candidate {row['candidate']}{_which(row)}", evidence=row)
    if all(r["reference"] == r["candidate"] for r in known):
        model = [r for r in known if r["model"] is not None and r["model"] != r["reference"]]
        note = "" if not model else f"; the model's tokenizer differs on {len(model)} of them"
        yield Problem(f"all {len(known)} prompt token counts are equal on both servers{note}", severity="info",
                      evidence={"counts": rows})
