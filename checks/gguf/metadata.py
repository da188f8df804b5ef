"""GGUF checks (GGF), part 1: the file and its tokenizer metadata. Converting and quantizing to GGUF is where
many real bugs are born (llama.cpp #7724/#7006 pre-tokenizer, #11201 chat template, vLLM #30434 EOS).

They run on a model path that is a .gguf file (or a directory holding one) and skip elsewhere. Tensor-level
GGUF checks live in checks/gguf/tensors.py.
"""
from __future__ import annotations

from checks.shared.chat.end_of_turn import end_of_turn
from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import Problem, Skip, check
from reference_engine.errors import ModelDirError

END_OF_TURN_PROBE = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]
INSTRUCT_WORDS = ("instruct", "chat", "-it", "_it", " it ", "assistant", "sft", "dpo", "rlhf")


def _gguf_or_skip(ctx):
    if not ctx.is_gguf:
        raise Skip("not a GGUF model")
    return ctx.gguf


@check("GGF001", category="files", severity="error", needs=(),
       hint="Re-download or re-convert the file; compare its size and sha256 with the source.")
def gguf_header_valid(ctx):
    """The GGUF header parses and every tensor lies inside the file.

    llmdoctor reads the header itself with bounded reads before trusting anything: magic and version, the
    metadata and tensor counts against the bytes actually present, every string length, array size and tensor
    extent, alignment, duplicate names and overlapping tensors. A truncated download, a file cut by a full
    disk or a corrupted header fails here with the first inconsistency; every other GGF check is skipped.
    """
    if not ctx.is_gguf:
        raise Skip("not a GGUF model")
    try:
        ctx.gguf
    except ResourceError as e:
        yield Problem(e.message.split(": ", 1)[-1] if ": invalid GGUF" in e.message else e.message,
                      evidence={"path": str(ctx.model_dir)})


@check("GGF002", category="files", severity="warning", needs=("gguf",),
       hint="Re-convert with a current convert_hf_to_gguf.py, or rewrite the key with gguf's gguf_set_metadata.")
def gguf_strings_utf8(ctx):
    """Every metadata string (and key) is valid UTF-8.

    GGUF strings are UTF-8 by specification. Bytes that are not UTF-8 (a name written in Latin-1, a chat
    template cut in the middle of a character) make strict readers (transformers, gguf's own `contents()`)
    fail and make llama.cpp print or render garbage. The keys listed hold such bytes.
    """
    gguf = _gguf_or_skip(ctx)
    if gguf.bad_utf8:
        yield Problem(f"{len(gguf.bad_utf8)} metadata entries are not valid UTF-8: {', '.join(gguf.bad_utf8[:5])}",
                      evidence={"keys": gguf.bad_utf8[:20]})


@check("GGF003", category="tokenizer", severity="error", needs=("gguf",),
       hint="Re-convert with a convert_hf_to_gguf.py that knows the model (it writes tokenizer.ggml.pre), or set "
            "the key to the expected value with gguf's gguf_new_metadata.py --general-... / gguf_set_metadata.")
def gguf_pre_tokenizer(ctx):
    """A BPE vocabulary names the pre-tokenizer it was trained with (tokenizer.ggml.pre).

    llama.cpp splits text with the regexes `tokenizer.ggml.pre` selects before BPE. A missing value or
    "default" makes it use generic regexes ("GENERATION QUALITY WILL BE DEGRADED", llama.cpp #7724, #7006): a
    Llama-3 model then sees different tokens than it was trained on. An unknown value makes llama.cpp refuse
    the file. The expected value is recomputed the way the converter picks it: the ids of its check text,
    hashed and looked up in its table of known models, trying every pre-tokenizer llama.cpp implements.
    """
    gguf = _gguf_or_skip(ctx)
    if gguf.get("tokenizer.ggml.model") != "gpt2":
        raise Skip("not a BPE (gpt2) vocabulary: llama.cpp uses no pre-tokenizer regexes for it")
    from checks.gguf.pre_tokenizer import known_pre, recompute_pre
    from reference_engine.tokenizer.sources.gguf_pre import pre_tokenizer_for
    pre = gguf.get("tokenizer.ggml.pre")
    pre = pre if isinstance(pre, str) else None
    tok = _tokenizer_with_pre(gguf, "default" if pre is None or pre_tokenizer_for(pre) is None else pre)
    candidates = recompute_pre(tok) if tok is not None else []
    expected = candidates[0] if candidates else None
    evidence = {"pre": pre, "expected": expected, "candidates": candidates}
    said = f"; llama.cpp's converter table says {' or '.join(map(repr, candidates))}" if candidates else \
        " (the vocabulary is not in llama.cpp's converter table, so the right value cannot be recomputed)"
    if pre is None or pre == "":
        yield Problem(f"tokenizer.ggml.pre is missing: llama.cpp falls back to generic 'default' regexes{said}",
                      evidence=evidence)
    elif pre_tokenizer_for(pre) is None:
        from reference_engine.tokenizer.sources.gguf_pre import PRE_TOKENIZERS
        level = "error" if not _llama_cpp_knows(pre) else "warning"
        yield Problem(f"tokenizer.ggml.pre = {pre!r} is not a pre-tokenizer llmdoctor implements"
                      f"{' nor one llama.cpp knows (it refuses the file)' if level == 'error' else ''}{said}",
                      evidence={**evidence, "known": len(PRE_TOKENIZERS)}, severity=level)
    elif pre == "default":
        yield Problem(f"tokenizer.ggml.pre = 'default' on a BPE vocabulary: generic regexes{said}", evidence=evidence)
    elif tok is not None and expected is not None and known_pre(tok) is None:
        yield Problem(f"tokenizer.ggml.pre = {pre!r} does not tokenize llama.cpp's check text like any known "
                      f"model{said}", evidence=evidence)


def _llama_cpp_knows(pre: str) -> bool:
    from checks.gguf.pre_hashes import KNOWN_HASHES
    return pre in set(KNOWN_HASHES.values())


def _tokenizer_with_pre(gguf, pre: str):
    """The GGUF's tokenizer with tokenizer.ggml.pre replaced (None when it cannot be built)."""
    from dataclasses import replace
    from reference_engine.tokenizer.tokenizer import Tokenizer
    try:
        return Tokenizer.from_gguf(replace(gguf, metadata={**gguf.metadata, "tokenizer.ggml.pre": pre}))
    except ModelDirError:
        return None


def _template_tokens(ctx):
    tok = ctx.tokenizer
    if not tok.chat_template:
        raise Skip("no tokenizer.chat_template")
    return tok


@check("GGF004", category="tokenizer", severity="error", needs=("gguf", "tokenizer"),
       hint="Set tokenizer.ggml.eos_token_id (or eot_token_id) to the template's end-of-turn token id.")
def gguf_eos_matches_template(ctx):
    """The chat template's end-of-turn token is the GGUF's EOS or EOT token.

    A model stops when it emits an end-of-generation token. Runtimes take it from tokenizer.ggml.eos_token_id
    (and eot_token_id). When the chat template ends each assistant turn with a different token (<|im_end|>,
    <|eot_id|>, <end_of_turn>) than the one declared, the model emits the template's token and generation
    runs on (vLLM #30434, unsloth #468). llama.cpp guesses a few well-known end-of-turn texts, other runtimes
    do not.
    """
    gguf = _gguf_or_skip(ctx)
    tok = _template_tokens(ctx)
    found = end_of_turn(tok)
    if found is None:
        raise Skip("the chat template writes no special token after an assistant message")
    token_id, token = found
    eog = {k: gguf.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")}
    if token_id not in eog.values():
        yield Problem(f"the chat template ends turns with {token!r} (id {token_id}) but EOS is "
                      f"{_describe(tok, eog['eos'])} and no EOT id names it: generation may never stop",
                      evidence={"end_of_turn": token, "end_of_turn_id": token_id,
                                **{f"{k}_id": v for k, v in eog.items()}})


def _describe(tok, token_id) -> str:
    return "unset" if token_id is None else f"{tok.id_to_token(token_id)!r} (id {token_id})"


@check("GGF005", category="tokenizer", severity="warning", needs=("gguf", "tokenizer"),
       hint="Set tokenizer.ggml.add_bos_token = false, or drop {{ bos_token }} from the template.")
def gguf_bos_twice(ctx):
    """The prompt does not start with two BOS tokens.

    A template that writes {{ bos_token }} meets a vocabulary that adds BOS (tokenizer.ggml.add_bos_token, or
    the implicit default of Llama-3 and SentencePiece vocabularies). llama.cpp's chat code strips one leading
    BOS from the rendered prompt when it adds its own (common/chat.cpp; the other runtimes that render templates
    do the same), so that layout is a note naming the hazard for code that renders the template and then
    tokenizes with add_special = true. A template that itself writes BOS twice gives two BOS on every runtime,
    and the model sees an input it never saw in training: a warning.
    """
    _gguf_or_skip(ctx)
    tok = _template_tokens(ctx)
    text = tok.apply_chat_template(END_OF_TURN_PROBE[:1], add_generation_prompt=True)
    bos = tok.bos_token_id
    if bos is None or not tok.bos_token or not text.startswith(tok.bos_token):
        return
    written = tok.encode(text, add_special_tokens=False)
    evidence = {"bos_id": bos, "rendered_start": text[:40]}
    if written[:2] == [bos, bos]:
        yield Problem(f"the chat template writes BOS twice ({tok.bos_token!r}): every runtime passes both to the "
                      f"model", evidence={**evidence, "first_ids": written[:4]})
    elif tok.encode(text, add_special_tokens=True)[:2] == [bos, bos]:
        yield Problem(f"the template writes BOS ({tok.bos_token!r}) and the vocabulary adds it: llama.cpp strips "
                      f"the template's copy, but code that renders the template and tokenizes with add_special "
                      f"passes two", severity="info", evidence=evidence,
                      hint="Nothing to change for llama.cpp; in your own code, tokenize the rendered prompt "
                           "with add_special = false.")


@check("GGF006", category="tokenizer", severity="warning", needs=("gguf",),
       hint="Copy the chat template from the original model's tokenizer_config.json into tokenizer.chat_template.")
def gguf_instruct_has_template(ctx):
    """An instruct/chat model carries its chat template (tokenizer.chat_template).

    Without a template, llama.cpp and Ollama fall back to a generic one (often ChatML or Llama-2 [INST]),
    which silently formats the conversation differently from the fine-tuning data (llama.cpp #11201). The
    model is taken to be an instruct model when its general.* names or its file name say so.
    """
    gguf = _gguf_or_skip(ctx)
    template = gguf.get("tokenizer.chat_template")
    if isinstance(template, str) and template.strip():
        return
    names = " ".join([*(str(gguf.get(k, "")) for k in ("general.name", "general.finetune", "general.basename")),
                      gguf.path.stem])
    hit = next((w for w in INSTRUCT_WORDS if w in f" {names.lower()} "), None)
    if hit:
        yield Problem(f"an instruct model ({names.strip()!r}) without tokenizer.chat_template: runtimes will guess "
                      f"the prompt format", evidence={"names": names.strip(), "matched": hit.strip()})


@check("GGF012", category="tokenizer", severity="error", needs=("gguf",),
       hint="Re-convert the tokenizer; every tokenizer.ggml.* array must have one entry per token.")
def gguf_tokenizer_metadata(ctx):
    """The tokenizer metadata is consistent: per-token arrays match the token list, special ids are in range.

    tokenizer.ggml.scores and token_type must have one entry per token, and bos/eos/eot/pad/unk ids must
    name a token. A mismatch makes llama.cpp refuse the file or read past the vocabulary; a BOS id out of
    range puts garbage at the start of every prompt.
    """
    gguf = _gguf_or_skip(ctx)
    tokens = gguf.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise Skip("no tokenizer.ggml.tokens (a GGUF without a tokenizer)")
    n = len(tokens)
    for key in ("scores", "token_type"):
        value = gguf.get(f"tokenizer.ggml.{key}")
        if value is not None and (not isinstance(value, list) or len(value) != n):
            yield Problem(f"tokenizer.ggml.{key} has {len(value) if isinstance(value, list) else 'no'} entries for "
                          f"{n} tokens", evidence={"key": key, "tokens": n})
    for key in ("bos", "eos", "eot", "eom", "padding", "unknown", "seperator"):
        value = gguf.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < n:
            yield Problem(f"tokenizer.ggml.{key}_token_id = {value} is outside the {n}-token vocabulary",
                          evidence={"key": key, "id": value, "tokens": n})
