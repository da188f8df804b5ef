"""Vocab checks (VOC): the tokenizer, config.json and the embedding/lm_head matrices agree on how many tokens
there are, and the special token ids every file declares exist and agree (config.json,
generation_config.json, tokenizer_config.json and special_tokens_map.json naming different EOS/BOS ids is a
classic cause of generations that never stop)."""
from __future__ import annotations

from dataclasses import dataclass

from checks.catalogue.registry import Problem, check
from checks.catalogue.locations import config_key, tensor
from findings import Location
from checks.shared.weights.tensor_layout import embed_name, output_rows_name
from checks.shared.token_table import special_strings

NAMES = ("bos", "eos", "pad", "unk")
VOCAB_SIZE = config_key("vocab_size")


def special_location(source: str, name: str) -> Location:
    """Where a special token is declared: `eos_token_id` in config/generation_config, `eos_token` for the tokenizer."""
    if source == "tokenizer":
        return Location(file="tokenizer_config.json", logical=f"{name}_token")
    return Location(file=source, logical=f"{name}_token_id")


@dataclass
class VocabSizes:
    tokenizer_vocab_size: int       # base vocab, tok.vocab_size
    tokenizer_len: int              # len(tok), with added tokens
    max_token_id: int               # largest id the tokenizer can emit
    config_vocab_size: int
    embedding_rows: int | None
    lm_head_rows: int | None

    @property
    def rows(self) -> int:
        """Rows every id must fit: the smallest of config.vocab_size, embedding rows and lm_head rows."""
        return min(v for v in (self.config_vocab_size, self.embedding_rows, self.lm_head_rows) if v is not None)

    def as_evidence(self) -> dict:
        return dict(self.__dict__)


def vocab_sizes(ctx) -> VocabSizes:
    tok, cfg, weights = ctx.tokenizer, ctx.config, ctx.weights
    head, embed = output_rows_name(cfg, weights), embed_name(weights)   # by role: any decoder's names
    return VocabSizes(tok.vocab_size, len(tok), tok.max_token_id, cfg.vocab_size,
                      weights.info(embed).shape[0] if embed is not None else None,
                      weights.info(head).shape[0] if head in weights else None)


@check("VOC001", category="vocab", severity="info", needs=("config", "tokenizer", "weights"),
       hint="Informational: the six vocabulary figures side by side.")
def vocab_summary(ctx):
    """Report the tokenizer's base vocab, len(tokenizer), max id + 1, config.vocab_size, embedding and lm_head rows.

    These six numbers are routinely confused: `tokenizer.vocab_size` excludes added tokens, `len(tok)`
    includes them, `config.vocab_size` is what engines allocate, and the embedding/lm_head matrices
    often carry padding rows (rounded up to a multiple of 64 or 128 for GPU efficiency, Qwen3#1247).
    Seeing them together explains every vocab finding below (transformers#26714: 32004 vs 32000;
    transformers#9247: T5 32100 vs 32128).
    """
    s = vocab_sizes(ctx)
    yield Problem(f"tokenizer vocab_size {s.tokenizer_vocab_size}, len {s.tokenizer_len}, max id+1 "
                  f"{s.max_token_id + 1}; config.vocab_size {s.config_vocab_size}; embedding rows "
                  f"{s.embedding_rows}; lm_head rows {s.lm_head_rows}", evidence=s.as_evidence(), location=VOCAB_SIZE)


@check("VOC002", category="vocab", severity="error", needs=("config", "tokenizer", "weights"),
       hint="Resize the embedding and lm_head (and config.vocab_size) to cover the tokenizer: "
            "`llmdoctor fix MODEL -o NEW --vocab`, or model.resize_token_embeddings(len(tokenizer)).")
def token_ids_beyond_embedding(ctx):
    """Every id the tokenizer can emit has a row in the embedding and lm_head (and is < config.vocab_size).

    Adding tokens to a tokenizer without resizing the model is the most common vocab bug: the first
    prompt containing a new token indexes past the embedding and crashes with "index out of range in
    self" on CPU or "device-side assert triggered" on CUDA (transformers#26714, inseq PR#306; vLLM
    rejects it as "Token id X is out of vocabulary", PR#16529). A `config.vocab_size` smaller than the
    tokenizer has the same effect in engines that size buffers from the config.

    Remedy: resize the embedding and lm_head to the tokenizer (then fine-tune the new rows).
    """
    s = vocab_sizes(ctx)
    if s.max_token_id < s.rows:
        return
    tok = ctx.tokenizer
    beyond = sorted(i for i in set(tok.get_vocab().values()) if i >= s.rows)
    yield Problem(f"{len(beyond)} token id(s) the tokenizer can emit are >= {s.rows} rows "
                  f"(max id {s.max_token_id}), e.g. {beyond[0]} {tok.id_to_token(beyond[0])!r}",
                  evidence={**s.as_evidence(), "ids_beyond": beyond[:20], "count": len(beyond)}, location=VOCAB_SIZE)


@check("VOC003", category="vocab", severity="warning", needs=("config", "tokenizer", "weights"),
       hint="Mask the extra rows' logits (bad_words_ids / logit bias) or trim the matrices with "
            "`llmdoctor fix --vocab`; most servers do not mask them.")
def rows_beyond_tokenizer(ctx):
    """The lm_head has no rows the tokenizer cannot produce (those ids are still sampleable).

    Padding rows (vocab rounded up for GPU efficiency, or left over after removing tokens) get logits
    like any other row. Sampling with temperature can pick one; the detokenizer has no string for it and
    vLLM fails with "Token id X is out of vocabulary" (vllm#13175, PR#11980) while transformers decodes
    it as an empty string. Intentional padding (Qwen3#1247) is still a hazard unless masked.

    Remedy: mask those logits at sampling time, or trim the matrices to the tokenizer.
    """
    s = vocab_sizes(ctx)
    rows = s.lm_head_rows if s.lm_head_rows is not None else s.embedding_rows
    if rows is None or rows <= s.max_token_id + 1:
        return
    yield Problem(f"lm_head has {rows - s.max_token_id - 1} row(s) past the tokenizer's last id "
                  f"{s.max_token_id}: sampling one yields an id no text maps to", evidence=s.as_evidence(),
                  location=tensor("lm_head.weight"))


def declared_special_ids(ctx) -> dict[str, dict[str, object]]:
    """{source: {name: id or list of ids}} for config.json, generation_config.json and the tokenizer."""
    cfg, gen, tok = ctx.config, ctx.generation_config, ctx.tokenizer
    out: dict[str, dict[str, object]] = {
        "config.json": {"bos": cfg.bos_token_id, "eos": cfg.eos_token_id, "pad": cfg.pad_token_id},
        "tokenizer": {"bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id,
                      "unk": tok.unk_token_id},
    }
    if gen is not None:
        out["generation_config.json"] = {"bos": gen.bos_token_id, "eos": gen.eos_token_ids or None,
                                         "pad": gen.pad_token_id}
    return {src: {k: v for k, v in ids.items() if v is not None} for src, ids in out.items()}


def _ids(value) -> list:
    return value if isinstance(value, list) else [value]


@check("VOC004", category="vocab", severity="error", needs=("config", "tokenizer", "weights"),
       hint="Point bos/eos/pad_token_id (config.json, generation_config.json) and the tokenizer's special "
            "tokens at tokens that exist in the vocabulary.")
def special_ids_in_range(ctx):
    """Special token ids (bos/eos/pad/unk) from every file are integers that exist in the vocabulary and the model.

    An eos_token_id past the embedding crashes generation the moment the model emits it or a template
    inserts it; an eos id that no token has means generation never stops; a special token string in
    tokenizer_config.json that is not in the vocabulary gives `eos_token_id = None` in transformers
    (inseq PR#306: special ids past tokenizer.vocab_size trigger a device-side assert).

    Remedy: correct the id or the token string so that they name an existing token.
    """
    s, tok = vocab_sizes(ctx), ctx.tokenizer
    for source, ids in declared_special_ids(ctx).items():
        for name, value in ids.items():
            for i in _ids(value):
                if isinstance(i, bool) or not isinstance(i, int) or i < 0:
                    yield Problem(f"{source} {name}_token_id {i!r} is not a token id", evidence={source: ids},
                                  location=special_location(source, name))
                elif i >= s.rows or tok.id_to_token(i) is None:
                    yield Problem(f"{source} {name}_token_id {i} is outside the vocabulary "
                                  f"(tokenizer max id {s.max_token_id}, {s.rows} rows)",
                                  evidence={source: ids, **s.as_evidence()},
                                  location=special_location(source, name))
    for name in NAMES:
        text = tok.special_token(f"{name}_token")
        if text is not None and tok.token_to_id(text) is None:
            yield Problem(f"tokenizer {name}_token {text!r} is not in the vocabulary", evidence={name: text},
                          location=special_location("tokenizer", name))


@check("VOC005", category="vocab", severity="warning", needs=("config", "tokenizer"),
       hint="Make config.json, generation_config.json, tokenizer_config.json and special_tokens_map.json "
            "declare the same special tokens.")
def special_ids_consistent(ctx):
    """config.json, generation_config.json, tokenizer_config.json and special_tokens_map.json agree on special tokens.

    Four files declare special tokens and each tool reads a different one: transformers' generate()
    stops on generation_config's eos, the tokenizer appends its own eos, vLLM reads both. When they
    disagree, generation does not stop at the end of a chat turn (runs on into a fake next turn) or a
    fine-tune learns an eos the server never stops on. A tokenizer eos missing from the generation
    stop set is the typical case.

    Remedy: make the files agree (the chat template's end-of-turn token must be a stop id).
    """
    declared = declared_special_ids(ctx)
    for name in ("bos", "pad"):
        values = {src: ids[name] for src, ids in declared.items() if name in ids}
        if len({repr(v) for v in values.values()}) > 1:
            yield Problem(f"{name} token ids disagree: " + ", ".join(f"{k} {v}" for k, v in values.items()),
                          evidence=values, location=special_location(next(iter(values)), name))
    tok_eos = declared["tokenizer"].get("eos")
    stops = declared.get("generation_config.json", {}).get("eos") or declared["config.json"].get("eos")
    if tok_eos is not None and stops is not None and tok_eos not in _ids(stops):
        yield Problem(f"tokenizer eos id {tok_eos} is not a generation stop id {stops}",
                      evidence={"tokenizer_eos": tok_eos, "stop_ids": stops},
                      location=special_location("generation_config.json" if "generation_config.json" in declared
                                                else "config.json", "eos"))
    yield from _string_files_agree(ctx)


def _string_files_agree(ctx):
    from reference_engine.config import read_json
    from reference_engine.errors import ModelDirError
    path = ctx.model_dir / "special_tokens_map.json"
    if not path.is_file():
        return
    try:
        mapped = special_strings(read_json(path))
    except ModelDirError:
        return  # FIL001 reports an unparseable file
    configured = special_strings(ctx.tokenizer_config)
    for key in sorted(set(mapped) & set(configured)):
        if mapped[key] != configured[key]:
            yield Problem(f"{key} is {configured[key]!r} in tokenizer_config.json but {mapped[key]!r} in "
                          f"special_tokens_map.json", evidence={"tokenizer_config": configured[key],
                                                                 "special_tokens_map": mapped[key]},
                          location=Location(file="special_tokens_map.json", logical=key))


@check("VOC006", category="vocab", severity="error", needs=("config", "tokenizer"),
       hint="Declare eos_token in tokenizer_config.json and eos_token_id in generation_config.json.")
def eos_defined(ctx):
    """An end-of-sequence token is defined somewhere (tokenizer, config.json or generation_config.json).

    Without an EOS, generation only stops at max_new_tokens, every completion is padded with
    rambling, and fine-tuning cannot teach the model to stop (Llama-2/3 fine-tunes missing eos are a
    classic source of "the model never stops talking").

    Remedy: declare the end-of-turn/end-of-text token as eos.
    """
    declared = declared_special_ids(ctx)
    if not any("eos" in ids for ids in declared.values()):
        yield Problem("no EOS token id in the tokenizer, config.json or generation_config.json",
                      evidence=declared, location=special_location("tokenizer", "eos"))


@check("VOC007", category="vocab", severity="info", needs=("tokenizer",),
       hint="For batched generation and training, use a dedicated pad token (or mask by attention_mask).")
def pad_token_noted(ctx):
    """Note when pad == eos, or no pad token is set (batched generation and training need one).

    With pad == eos, a collator that masks pad positions out of the loss also masks the real EOS, so a
    fine-tuned model never learns to stop; batched generation must rely on the attention mask alone
    (transformers#25790). No pad token at all makes `tokenizer(..., padding=True)` fail.

    Remedy: add a dedicated pad token, or make sure labels keep the final EOS.
    """
    tok = ctx.tokenizer
    if tok.pad_token_id is None:
        yield Problem("no pad token: batched encoding needs one", evidence={"pad_token": tok.pad_token},
                      location=special_location("tokenizer", "pad"))
    elif tok.pad_token_id == tok.eos_token_id:
        yield Problem(f"pad token is the eos token ({tok.pad_token!r}, id {tok.pad_token_id})",
                      evidence={"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id},
                      location=special_location("tokenizer", "pad"))
