"""The three-step golden debug method: tokenizer -> transformer core -> detokenizer, each step a check
built on that stage's validate() hook. A step that fails stops the later ones ("not run: step N failed"), so
the report names the first broken stage instead of piling up consequences.
"""
from __future__ import annotations

from checks.shared.probe_runs import FORWARD, GREEDY, forward_runs, probe_traces
from checks.shared.prompts import CHAT_PROBE, probe_texts, render_chat
from checks.catalogue.registry import Problem, Skip, check
from reference_engine.tokenizer import validate as tokenizer_validate

# the tokenizer invariants the model's files decide; "batch" (padding, masks, positions: computed by llmdoctor
# itself whatever the files say) is the reference engine's self-test ENG004
FILE_PARTS = ("ids", "special tokens", "round trip")
STEP_KEY = "golden_steps"      # ctx.state[STEP_KEY][n] = True (passed) / False (failed)
TWO_TURNS = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
             {"role": "user", "content": "Name three colours of the rainbow, please."}]
# hook point -> the sub-module a finding names
SUBMODULE = {"embed": "embedding", "input_norm": "norm", "attn": "attention", "post_norm": "norm", "mlp": "mlp",
             "hidden": "residual", "final_norm": "norm", "logits": "lm_head"}


def _record(ctx, step: int, passed: bool) -> None:
    ctx.state.setdefault(STEP_KEY, {})[step] = passed


def _require_steps(ctx, *steps: int) -> None:
    done = ctx.state.get(STEP_KEY, {})
    for step in steps:
        if done.get(step) is False:
            raise Skip(f"not run: step {step} failed")


# ---- step 1: tokenizer ---------------------------------------------------------------------------------

def padding_problems(tok, rows: list[str], add_special_tokens: bool, label: str) -> list[Problem]:
    """Per row of one padded batch (the tokenizer's own padding side): pads never inside the attention mask,
    the last column real in every row (what generation appends to)."""
    if len(rows) < 2:
        return []
    batch = tok(rows, padding=True, add_special_tokens=add_special_tokens, return_tensors=None)
    pad = tok.pad_token_id
    specials = {tok.bos_token_id, tok.eos_token_id}
    out = []
    for r, (ids, mask) in enumerate(zip(batch["input_ids"], batch["attention_mask"])):
        real = [(i, t) for i, (t, m) in enumerate(zip(ids, mask)) if m]
        pads_inside = [i for i, t in real if t == pad] if pad is not None and pad not in specials else []
        if pads_inside:
            after = [tok.id_to_token(t) for i, t in real if i > pads_inside[0] and t != pad]
            markers = list(dict.fromkeys(t for t in after if t and t.startswith("<") and t.endswith(">")))
            out.append(Problem(
                f"{label} row {r + 1}: pad token {tok.pad_token!r} sits inside the attention mask at columns "
                f"{pads_inside[:6]}" + (f", before role markers {markers[:4]}" if markers else ""),
                evidence={"row": r + 1, "input_ids": ids, "attention_mask": mask, "pad_token_id": pad,
                          "tokens_after_padding": after[:12], "text": rows[r][:200]}))
    if tok.padding_side == "right" and not all(mask[-1] for mask in batch["attention_mask"]):
        out.append(Problem(
            f"{label}: padding_side is 'right': in a batch, shorter rows end in pad tokens and generation appends "
            "after them (transformers warns 'right-padding was detected')", severity="warning",
            evidence={"padding_side": "right", "last_column_mask": [m[-1] for m in batch["attention_mask"]]}))
    return out


@check("GLD001", category="golden", severity="error", needs=("tokenizer",),
       hint="Fix the tokenizer files (see the probe named in evidence); decoder-only models need left padding.")
def golden_tokenizer(ctx):
    """Golden step 1: the tokenizer's invariants hold on the probe prompts and chat template, per padded row.

    The first of the three debug steps (tokenizer, transformer core, detokenizer). Runs the parts of the
    tokenizer stage's validate() that the tokenizer files decide, on the built-in probes and the chat probe
    rendered with the model's template: ids are in the vocabulary, bos/eos/pad/unk tokens exist, special
    tokens sit where the post-processor puts them, and encode/decode round-trips. Then it pads a batch the way
    the tokenizer is configured and checks each row: a pad token inside the attention mask (a chat template
    that writes pad tokens before its role markers, so every <|user|> ends up behind the padding: a two-day
    production outage in the article this tool grew from) is an error; right padding for a decoder-only
    model is a warning (generation appends after the pads; transformers#25790, unsloth#3699). The batch
    invariants llmdoctor computes itself (mask sums, position ids) are the self-test ENG004.

    When this step fails, golden steps 2 and 3 report "not run: step 1 failed".
    """
    tok = ctx.tokenizer
    texts = list(probe_texts(ctx.quick))
    chats = [c for c in (render_chat(tok, CHAT_PROBE), render_chat(tok, TWO_TURNS)) if c is not None]
    problems = [Problem(f"tokenizer validate(): {line}", evidence={"probes": texts + chats})
                for line in tokenizer_validate(tok, texts + chats, parts=FILE_PARTS)]
    try:
        problems += padding_problems(tok, texts, True, "probe batch")
        problems += padding_problems(tok, chats, False, "chat batch")
    except Exception as e:  # validate() never raises; padding a batch may
        problems.append(Problem(f"padding the probe batch raised {type(e).__name__}: {e}",
                                evidence={"probes": texts + chats}))
    _record(ctx, 1, not any((p.severity or "error") == "error" for p in problems))
    yield from problems


# ---- step 2: transformer core --------------------------------------------------------------------------

def localize(run, explode: float) -> dict | None:
    """The first hook point (layer, sub-module) whose output is non-finite or exceeds `explode`."""
    bad = run.stats.first_bad(explode)
    if bad is None:
        return None
    return {"layer": bad.layer, "module": bad.module, "submodule": SUBMODULE.get(bad.module, bad.module),
            "nonfinite": bad.nonfinite, "absmax": bad.absmax}


def where(spot: dict, layers: int) -> str:
    if spot["module"] == "embed":
        return "the embedding lookup"
    if spot["layer"] >= layers:
        return f"the {spot['submodule']} after the last layer ({spot['module']})"
    return f"layer {spot['layer']} {spot['submodule']} ({spot['module']} output)"


@check("GLD002", category="golden", severity="error", needs=("engine", "tokenizer"),
       hint="Look at the named layer's weights (WGT005/WGT008) and run in float32 or bfloat16 (NUM001).",
       shares=(FORWARD,))
def golden_core(ctx):
    """Golden step 2: core forward logits are [seq, vocab], finite, below the magnitude threshold, not flat.

    The transformer core's validate() on every probe's logits: shape [seq, vocab], all finite, max |logit|
    below `max_abs_logit` (default 100; threshold GLD002.max_abs_logit), and a last-position standard
    deviation that is not ~0 (a flat distribution: a zeroed norm or lm_head). When it fails, the recorded
    hidden states of every layer (the engine's capture hooks: embed, per layer input_norm, attn, post_norm,
    mlp, residual, then final_norm and logits) locate the first layer and sub-module where values go NaN/Inf
    or exceed `explode` (default 65504, the float16 limit) — the bisection is exact because every boundary
    is recorded in the same pass. Modelled on vllm#14126 and onnxruntime-genai PR#2444 (activations past
    65504 at layer 35 -> NaN -> "!!!!").
    """
    _require_steps(ctx, 1)
    limit = ctx.threshold("GLD002", "max_abs_logit", 100.0)
    explode = ctx.threshold("GLD002", "explode", 65504.0)
    engine, failed = ctx.engine, False
    layers = engine.config.num_hidden_layers
    for run in forward_runs(ctx):
        problems = engine.validate(run.logits, positions=list(range(len(run.probe.ids))), max_abs_logit=limit)
        last = run.logits[-1]
        if not problems and float(last.std()) < 1e-6:
            problems = [f"last-position logits are flat (std {float(last.std()):.3g}): every token equally likely"]
        if not problems:
            continue
        failed = True
        spot = localize(run, explode) or {}
        evidence = {"probe": run.probe.label, "text": run.probe.text[:200], "problems": problems}
        message = f"{run.probe.label}: {problems[0]}"
        if spot:
            evidence.update(first_bad=spot)
            message += f"; values first go {'non-finite' if spot['nonfinite'] else 'out of range'} at " \
                       f"{where(spot, layers)}"
        if not bool(last.isfinite().any()):
            evidence["argmax_of_nan"] = 0
            message += "; argmax of all-NaN logits is id 0 (the '!!!!' output)"
        yield Problem(message, evidence=evidence)
    _record(ctx, 2, not failed)


# ---- step 3: detokenizer closed loop -------------------------------------------------------------------

@check("GLD003", category="golden", severity="error", needs=("engine", "tokenizer"),
       hint="Follow the named problem: a NaN step points at numerics (NUM001), an unknown id at the vocab (VOC).",
       shares=(GREEDY,))
def golden_closed_loop(ctx):
    """Golden step 3: prompt -> logits -> argmax -> decode gives valid text, and greedy steps stay finite.

    The detokenizer stage's validate() (reference_engine.generate.loop.validate): the last position's softmax
    is finite and sums to 1, the argmax id exists in the tokenizer and the embedding and decodes to valid
    UTF-8, and the sampler's filtered distributions are sane for common settings. Then the probes' greedy
    steps through the KV cache (the traces the generation checks read, run once): a step whose logits are all
    NaN makes argmax pick id 0, which most byte-level vocabularies decode as "!" — the "all NaN -> argmax 0 ->
    '!!!!'" signature of fp16 overflow, flagged by name. The closed loop reads the traces' first step (the
    prompt's last position), so this check adds no pass over the weights. Runs only when steps 1 and 2 passed.
    """
    _require_steps(ctx, 1, 2)
    from reference_engine.generate import validate as closed_loop
    failed = False
    for probe, trace in probe_traces(ctx):
        problems = closed_loop(ctx.engine, list(probe.ids), logits=trace.first_logits)
        if trace.finish == "nonfinite":
            piece = _piece(ctx.tokenizer, trace.tokens[-1])
            problems.append(f"greedy step {len(trace.tokens)} has non-finite logits: argmax -> id "
                            f"{trace.tokens[-1]} ({piece!r}), the 'all NaN -> id 0 -> \"!!!!\"' signature")
        if problems:
            failed = True
            yield Problem(f"{probe.label}: {problems[0]}", evidence={"probe": probe.label, "problems": problems,
                                                                   "greedy_ids": trace.tokens})
    _record(ctx, 3, not failed)


def _piece(tok, token: int) -> str:
    try:
        return tok.decode([token])
    except Exception:
        return "?"
