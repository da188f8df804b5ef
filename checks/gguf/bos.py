"""GGF038: a GGUF adds BOS (tokenizer.ggml.add_bos_token) where the model was trained with one.

llama.cpp puts BOS first only when add_bos_token says so; a converter or an edit that wrote false for a model
trained with BOS (the tokenizer.json beside it adds one; Gemma, which llama.cpp's converter always marks) sends
every raw prompt without it, and every chat prompt too where the template does not write bos_token itself: the
model repeats itself or drifts. The opposite, a BOS the tokenizer it was converted from never adds, puts a token
first that the model never saw there."""
from __future__ import annotations

import json
from pathlib import Path

from checks.catalogue.registry import Problem, Skip, check
from reference_engine.errors import ModelDirError

# architectures trained with BOS first, for which llama.cpp's converter writes add_bos_token true whatever the
# tokenizer files say (conversion/gemma.py): without it Gemma reads garbage
TRAINED_WITH_BOS = ("gemma", "gemma2", "gemma3", "gemma3n", "gemma-embedding")


def beside_adds_bos(gguf) -> tuple[bool, str] | None:
    """(whether the tokenizer files beside the GGUF add BOS, what BOS is), or None where there are none. Read from
    tokenizer_config.json's add_bos_token when set (transformers rebuilds the post-processor from it), else from
    tokenizer.json's post-processor; the vocabulary itself is not built."""
    from reference_engine.tokenizer.pipeline.post_processors import build_post_processor
    directory = Path(gguf.path).parent
    spec_path, config_path = directory / "tokenizer.json", directory / "tokenizer_config.json"
    if not spec_path.is_file():
        return None
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        bos = config.get("bos_token") if isinstance(config, dict) else None
        bos = bos.get("content") if isinstance(bos, dict) else bos
        if not isinstance(bos, str):
            return False, "BOS"
        flag = config.get("add_bos_token")
        if isinstance(flag, bool):
            return flag, bos
        processor = build_post_processor(spec.get("post_processor"), str(spec_path))
        ids = processor([]) if processor is not None else []
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ModelDirError):
        return None
    return bool(ids) and ids[0] == _token_id(spec, bos), bos


def _token_id(spec: dict, text: str) -> int | None:
    for added in spec.get("added_tokens") or []:
        if isinstance(added, dict) and added.get("content") == text:
            return added.get("id")
    vocab = (spec.get("model") or {}).get("vocab")
    return vocab.get(text) if isinstance(vocab, dict) else None


def _template_writes_bos(gguf, bos_text: str | None) -> bool:
    template = gguf.get("tokenizer.chat_template")
    return isinstance(template, str) and ("bos_token" in template or bool(bos_text and bos_text in template))


@check("GGF038", category="tokenizer", severity="warning", needs=("gguf",),
       hint="Set tokenizer.ggml.add_bos_token to what the model was trained with (gguf_set_metadata.py), or "
            "re-convert; the tokenizer.json it came from says which.")
def gguf_adds_trained_bos(ctx):
    """The GGUF adds BOS exactly when the model was trained with it.

    llama.cpp starts a prompt with BOS only when tokenizer.ggml.add_bos_token is true. A false flag on a model
    trained with BOS (the tokenizer.json beside the file adds it; every Gemma) leaves every raw prompt without
    it, and chat prompts too unless the template writes bos_token: repetition and drift from the first token.
    A true flag where the tokenizer it came from adds none puts a token first that the model never saw there.
    The GGUF is compared with the tokenizer files beside it, or, alone, with its architecture.
    """
    if not ctx.is_gguf:
        raise Skip("not a GGUF model")
    gguf = ctx.gguf
    arch, flag = str(gguf.get("general.architecture")), gguf.get("tokenizer.ggml.add_bos_token")
    bos_id, tokens = gguf.get("tokenizer.ggml.bos_token_id"), gguf.get("tokenizer.ggml.tokens") or []
    bos_text = tokens[bos_id] if isinstance(bos_id, int) and 0 <= bos_id < len(tokens) else None
    adds = flag is True
    beside = beside_adds_bos(gguf)
    trained, source = (beside[0], "the tokenizer.json beside it adds it") if beside is not None else \
        (True if arch in TRAINED_WITH_BOS else None, f"{arch} is trained with it")
    if trained is None or trained == adds:
        return
    evidence = {"add_bos_token": flag, "bos": bos_text, "architecture": arch, "trained_with_bos": trained}
    if trained:
        chat = "chat prompts keep it (the template writes it)" if _template_writes_bos(gguf, bos_text) else \
            "chat prompts too (the template does not write it)"
        yield Problem(f"tokenizer.ggml.add_bos_token is {flag!r} but {source}: llama.cpp sends raw prompts without "
                      f"{bos_text or 'BOS'!r}, {chat}; the model repeats or drifts", evidence=evidence)
    else:
        yield Problem(f"tokenizer.ggml.add_bos_token is true but the tokenizer.json beside the GGUF adds no BOS: "
                      f"llama.cpp puts {bos_text or 'BOS'!r} first, where the model never saw it",
                      evidence=evidence)
