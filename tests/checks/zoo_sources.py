"""The tokenizer-source zoo: healthy directories built from real tokenizer files, and faults that each plant
one disagreement between the sources (TOK007, TOK020-TOK029).

Bases (each built once per session, copied per fault):
- "mistral": Mistral 7B v0.1's tokenizer.model (mistral-common wheel) with the tokenizer.json and
  tokenizer_config.json a converted Hugging Face repository holds (legacy, add_bos_token), config.json and
  generation_config.json with the trainer spec's ids;
- "llama2": the same for Llama 2's vocabulary rebuilt from llama.cpp's ggml-vocab-llama-spm.gguf;
- "tiktoken": SmolLM2's tokenizer.json and tokenizer_config.json with a consistent tiktoken export of its
  vocabulary as original/tokenizer.model;
- "llama3": Llama 3's vocabulary (llama.cpp's ggml-vocab-llama-bpe.gguf converted by transformers), its 256
  special tokens in tokenizer.json's model.vocab as well as in added_tokens (as Meta's repository has them), the
  128000 ordinary ranks as original/tokenizer.model (a tiktoken file holds no special token), Llama 3 Instruct's
  chat template (it writes {{ bos_token }}; the post-processor adds BOS too); "llama3_outside": the same with the
  special tokens only in added_tokens;
- "mistral_v7": Mistral's v7 tokenizer.model ([REF] and [REFERENCE_DOC_n] as USER_DEFINED pieces) with the
  tokenizer.json transformers' converter writes and Mistral Instruct's chat template (writes {{ bos_token }});
- "tekken": the first 3000 ids of mistral-common's tekken_240718.json and the tokenizer.json transformers'
  convert_tekken_tokenizer makes from it.
"""
from __future__ import annotations

import base64
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests import assets, spm_files

BASES = ("mistral", "llama2", "tiktoken", "tekken", "llama3", "llama3_outside", "mistral_v7")
TEKKEN_VOCAB, TEKKEN_SPECIALS = 2000, 1000
BOS_TEMPLATE = "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
PLAIN_TEMPLATE = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"
# the chat templates of Meta-Llama-3-8B-Instruct and Mistral-7B-Instruct-v0.2 (tokenizer_config.json), as released
LLAMA3_INSTRUCT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
MISTRAL_INSTRUCT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")


@dataclass(frozen=True)
class SourceFault:
    name: str
    base: str
    apply: Callable[[Path], None]
    check: str
    severity: str
    anchor: str = ""


def read(d: Path, name: str) -> dict:
    return json.loads((d / name).read_text(encoding="utf-8"))


def write(d: Path, name: str, obj) -> None:
    (d / name).parent.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")


def edit(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        obj = read(d, name)
        change(obj)
        write(d, name, obj)
    return apply


# ---- bases ------------------------------------------------------------------------------------------------

def build_base(name: str, root: Path) -> Path:
    out = root / name
    if name in ("mistral", "llama2", "mistral_v7"):
        proto = spm_files.llama2_proto() if name == "llama2" else spm_files.mistral_proto(
            spm_files.MISTRAL_V7 if name == "mistral_v7" else spm_files.MISTRAL_V1)
        plain = spm_files.write_dir(root / f"{name}-spm", proto)
        extra = {"chat_template": MISTRAL_INSTRUCT_TEMPLATE} if name == "mistral_v7" else {}
        spm_files.converted_dir(out, plain, legacy=True, **extra)
        write(out, "config.json", {"architectures": ["LlamaForCausalLM" if name == "llama2" else
                                                     "MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2})
        write(out, "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    elif name in ("llama3", "llama3_outside"):
        llama3_base(out, specials_in_vocab=name == "llama3")
    elif name == "tiktoken":
        smollm2 = assets.smollm2_dir()
        out.mkdir(parents=True)
        for file in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
            shutil.copy(smollm2 / file, out / file)
        (out / "original").mkdir()
        (out / "original" / "tokenizer.model").write_text(tiktoken_export(out / "tokenizer.json"), encoding="utf-8")
    else:
        tekken_base(out)
    return out


def tiktoken_export(tokenizer_json: Path, skip_added: bool = False) -> str:
    """The tiktoken file of a byte-level tokenizer.json's model vocabulary (rank = id), without the added tokens
    when `skip_added` (a real tiktoken file holds no special token)."""
    from reference_engine.tokenizer.pipeline.pre_tokenizers import UNICODE_TO_BYTES
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    added = {a["content"] for a in spec["added_tokens"]} if skip_added else set()
    lines = [f"{base64.b64encode(bytes(UNICODE_TO_BYTES[c] for c in token)).decode()} {i}"
             for token, i in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1]) if token not in added]
    return "\n".join(lines) + "\n"


def llama3_base(out: Path, specials_in_vocab: bool) -> None:
    source = assets.llamacpp_tokenizer_dir("llama-bpe")
    out.mkdir(parents=True)
    spec = read(source, "tokenizer.json")
    assert sum(a["content"] in spec["model"]["vocab"] for a in spec["added_tokens"]) == 256   # Meta's layout
    bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
    spec["post_processor"] = {   # Meta's: BOS before every sequence
        "type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|begin_of_text|>",
                                                                                 "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                 "tokens": ["<|begin_of_text|>"]}}}
    (out / "original").mkdir()
    write(out, "tokenizer.json", spec)
    (out / "original" / "tokenizer.model").write_text(tiktoken_export(out / "tokenizer.json", skip_added=True),
                                                      encoding="utf-8")
    if not specials_in_vocab:
        added = {a["content"] for a in spec["added_tokens"]}
        spec["model"]["vocab"] = {t: i for t, i in spec["model"]["vocab"].items() if t not in added}
        write(out, "tokenizer.json", spec)
    config = read(source, "tokenizer_config.json")
    config.update(chat_template=LLAMA3_INSTRUCT_TEMPLATE, eos_token="<|eot_id|>")
    write(out, "tokenizer_config.json", config)
    write(out, "config.json", {"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000,
                               "eos_token_id": [128001, 128009]})
    write(out, "generation_config.json", {"bos_token_id": 128000, "eos_token_id": [128001, 128009]})


def tekken_base(out: Path) -> None:
    import mistral_common
    from transformers.integrations.mistral import convert_tekken_tokenizer

    source = Path(mistral_common.__file__).parent / "data" / "tekken_240718.json"
    tekken = json.loads(source.read_text(encoding="utf-8"))
    tekken["vocab"] = tekken["vocab"][:TEKKEN_VOCAB]
    tekken["config"].update(num_vocab_tokens=TEKKEN_VOCAB, default_vocab_size=TEKKEN_VOCAB + TEKKEN_SPECIALS,
                            default_num_special_tokens=TEKKEN_SPECIALS)
    tekken.pop("image", None)
    out.mkdir(parents=True)
    write(out, "tekken.json", tekken)
    convert_tekken_tokenizer(str(out / "tekken.json")).save_pretrained(out)


# ---- faults -----------------------------------------------------------------------------------------------

def swap_vocab(a: str, b: str) -> Callable[[dict], None]:
    def change(tok: dict) -> None:
        vocab = tok["model"]["vocab"]
        vocab[a], vocab[b] = vocab[b], vocab[a]
    return change


def drop_prepend(tok: dict) -> None:
    tok["normalizer"]["normalizers"] = [n for n in tok["normalizer"]["normalizers"] if n["type"] != "Prepend"]


def no_bos_in_post_processor(tok: dict) -> None:
    tok["post_processor"] = {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [{"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}}


def swap_tiktoken_ranks(d: Path, pairs=((300, 301),)) -> None:
    path = d / "original" / "tokenizer.model"
    lines = path.read_text(encoding="utf-8").splitlines()
    for x, y in pairs:
        (a, ra), (b, rb) = lines[x].split(), lines[y].split()
        lines[x], lines[y] = f"{b} {ra}", f"{a} {rb}"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


THREE_PAIRS = ((300, 301), (5000, 70000), (127998, 127999))


def swap_tekken_ranks(tekken: dict) -> None:
    vocab = tekken["vocab"]
    vocab[500]["token_bytes"], vocab[501]["token_bytes"] = vocab[501]["token_bytes"], vocab[500]["token_bytes"]


def gpt2_regex(tok: dict) -> None:
    """The pre-tokenizer regex replaced by GPT-2's (what a converter without Tekken's pattern would write)."""
    from reference_engine.tokenizer.pipeline.pre_tokenizers import GPT2_REGEX

    def walk(spec):
        if isinstance(spec, dict):
            if spec.get("type") == "Split":
                spec["pattern"] = {"Regex": GPT2_REGEX}
            for child in spec.get("pretokenizers") or []:
                walk(child)
    walk(tok["pre_tokenizer"])


def edit_model(change: Callable) -> Callable[[Path], None]:
    """Rewrite tokenizer.model through protobuf's own classes."""
    def apply(d: Path) -> None:
        spm_files.write_dir(d, spm_files.edited(spm_files.load(d / "tokenizer.model"), change))
    return apply


def swap_merges(tok: dict) -> None:
    merges = tok["model"]["merges"]
    merges[10], merges[4000] = merges[4000], merges[10]


def rescore(proto) -> None:
    piece = next(p for p in proto.pieces if p.piece == "▁world")
    piece.score = 0.5    # above every merge: sentencepiece now builds "▁world" first


def no_byte_fallback(proto) -> None:
    """byte_fallback off, the <0xNN> pieces kept as UNUSED (sentencepiece loads it: unknown characters are <unk>)."""
    proto.trainer_spec.byte_fallback = False
    for piece in proto.pieces:
        if piece.type == 6:
            piece.type = 5


def drop_tiktoken_line(d: Path) -> None:
    path = d / "original" / "tokenizer.model"
    lines = path.read_text(encoding="utf-8").splitlines()
    del lines[1000]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def both(*changes: Callable[[Path], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        for change in changes:
            change(d)
    return apply


def jinja(text: str) -> Callable[[Path], None]:
    return lambda d: (d / "chat_template.jinja").write_text(text, encoding="utf-8")


FAULTS = [
    SourceFault("vocab_ids_swapped", "mistral", edit("tokenizer.json", swap_vocab("▁the", "▁a")), "TOK020", "error",
                "tokenizer.json regenerated from another vocabulary"),
    SourceFault("llama2_vocab_ids_swapped", "llama2", edit("tokenizer.json", swap_vocab("▁Hello", "▁world")),
                "TOK020", "error"),
    SourceFault("merges_reordered", "mistral", edit("tokenizer.json", swap_merges), "TOK020", "error",
                "merges out of the score order sentencepiece merges in"),
    SourceFault("model_score_edited", "llama2", edit_model(rescore), "TOK020", "error"),
    SourceFault("model_byte_fallback_off", "mistral", edit_model(no_byte_fallback), "TOK021", "error",
                "tokenizer.json claims a byte fallback the model was not trained with"),
    SourceFault("model_dummy_prefix_off", "llama2", edit_model(lambda p: setattr(
        p.normalizer_spec, "add_dummy_prefix", False)), "TOK022", "warning"),
    SourceFault("tiktoken_line_dropped", "tiktoken", drop_tiktoken_line, "TOK027", "error"),
    SourceFault("model_truncated", "mistral", lambda d: (d / "tokenizer.model").write_bytes(
        (d / "tokenizer.model").read_bytes()[:300_000]), "TOK029", "error", "an interrupted download"),
    SourceFault("byte_fallback_lost", "mistral", edit("tokenizer.json", lambda t: t["model"].update(
        byte_fallback=False)), "TOK021", "error", "converter without handle_byte_fallback"),
    SourceFault("dummy_prefix_lost", "llama2", edit("tokenizer.json", drop_prepend), "TOK022", "warning",
                "a normalizer without Prepend('▁')"),
    SourceFault("legacy_declared_false", "llama2", edit("tokenizer_config.json", lambda c: c.update(legacy=False)),
                "TOK023", "warning", "transformers#25073, llama.cpp#7094 (Llama 2's own repository)"),
    SourceFault("legacy_undeclared_non_legacy_json", "mistral", both(
        edit("tokenizer_config.json", lambda c: c.pop("legacy")),
        edit("tokenizer.json", lambda t: t.update(normalizer=None, pre_tokenizer={
            "type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}))),
        "TOK023", "warning"),
    SourceFault("add_bos_not_in_post_processor", "mistral", edit("tokenizer.json", no_bos_in_post_processor),
                "TOK024", "warning", "transformers#30947"),
    SourceFault("trainer_eos_differs", "mistral", edit("generation_config.json", lambda g: g.update(
        eos_token_id=13)), "TOK025", "warning", "a fine-tune's stop id"),
    SourceFault("template_copies_differ", "mistral", both(
        edit("tokenizer_config.json", lambda c: c.update(chat_template=PLAIN_TEMPLATE)),
        jinja(PLAIN_TEMPLATE.replace("[INST] ", "[INST]"))), "TOK026", "warning",
        "transformers reads chat_template.jinja, llama.cpp's converter tokenizer_config.json"),
    SourceFault("template_writes_bos", "llama2", edit("tokenizer_config.json", lambda c: c.update(
        chat_template=BOS_TEMPLATE)), "TOK007", "info", "llama.cpp PR #7332: a hazard for render-then-encode code"),
    SourceFault("template_writes_bos_twice", "llama3", edit("tokenizer_config.json", lambda c: c.update(
        chat_template="{{ bos_token }}" + LLAMA3_INSTRUCT_TEMPLATE)), "TOK007", "warning",
        "BOS twice whatever the runtime"),
    SourceFault("llama3_tiktoken_three_pairs_swapped", "llama3", lambda d: swap_tiktoken_ranks(d, THREE_PAIRS),
                "TOK027", "error", "original/tokenizer.model out of step with tokenizer.json"),
    SourceFault("llama3_outside_tiktoken_three_pairs_swapped", "llama3_outside",
                lambda d: swap_tiktoken_ranks(d, THREE_PAIRS), "TOK027", "error"),
    SourceFault("mistral_v7_user_defined_piece_renamed", "mistral_v7", edit("tokenizer.json", lambda t: next(
        a for a in t["added_tokens"] if a["content"] == "[REF]").update(content="[REFS]")), "TOK020", "error",
        "tokenizer.json's added token no longer the piece tokenizer.model has at that id"),
    SourceFault("tiktoken_ranks_swapped", "tiktoken", swap_tiktoken_ranks, "TOK027", "error",
                "original/tokenizer.model out of step with tokenizer.json"),
    SourceFault("tekken_ranks_swapped", "tekken", edit("tekken.json", swap_tekken_ranks), "TOK028", "error"),
    SourceFault("tekken_regex_replaced", "tekken", edit("tokenizer.json", gpt2_regex), "TOK028", "warning",
                "transformers PR #42299 (fix_mistral_regex)"),
]
