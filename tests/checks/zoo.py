"""The fault zoo: named ways to break a healthy factory model directory, each with the static check that must
catch it. FAULTS is the one table of (fault, base model, expected check id, expected severity, bug anchor).

Every `apply` edits a COPY of a healthy directory in place (tests copy with shutil.copytree first). Weights are
rewritten with safetensors (tests may use it; the checks themselves read with our own validator and mmap)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

from reference_engine.testing.factory import EOS, IM_END, IM_START, PAD
from reference_engine.tokenizer.pipeline.pre_tokenizers import BYTES_TO_UNICODE

EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"
SHARD_1, SHARD_2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
# base model directories the faults start from: name -> factory_model_dir(preset, **overrides) arguments
BASES = {
    "llama": ("llama", {}),
    "sharded": ("llama", {"shards": 2}),
    "deep": ("llama", {"num_hidden_layers": 4}),
    "mixtral": ("mixtral", {}),                 # engine families beyond Llama
    "gemma2": ("gemma2", {}),
    "gpt_oss": ("gpt_oss", {}),
}


@dataclass(frozen=True)
class Fault:
    name: str
    apply: Callable[[Path], None]
    check: str                 # the check id that must fire
    severity: str              # at this severity
    anchor: str = ""           # the public bug report or pitfall it models
    base: str = "llama"


# ---- editing helpers -----------------------------------------------------------------------------------

def read_json(d: Path, name: str) -> dict:
    return json.loads((d / name).read_text(encoding="utf-8"))


def write_json(d: Path, name: str, obj: dict) -> None:
    (d / name).write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")


def edit_json(name: str, **updates) -> Callable[[Path], None]:
    """A fault that sets keys in one JSON file (a value of DELETE removes the key)."""
    def apply(d: Path) -> None:
        obj = read_json(d, name)
        for key, value in updates.items():
            if value is DELETE:
                obj.pop(key, None)
            else:
                obj[key] = value
        write_json(d, name, obj)
    return apply


DELETE = object()


def edit_tensors(change: Callable[[dict[str, torch.Tensor], Path], None],
                 file: str = "model.safetensors") -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        tensors = load_file(str(d / file))
        change(tensors, d)
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(d / file), metadata={"format": "pt"})
    return apply


def edit_tokenizer(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        tok = read_json(d, "tokenizer.json")
        change(tok)
        write_json(d, "tokenizer.json", tok)
    return apply


def special_id(d: Path, content: str) -> int:
    return next(t["id"] for t in read_json(d, "tokenizer.json")["added_tokens"] if t["content"] == content)


def both(*faults: Callable[[Path], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        for fault in faults:
            fault(d)
    return apply


# ---- files ---------------------------------------------------------------------------------------------

def delete(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def write_text(name: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(text, encoding="utf-8")


def truncate(d: Path) -> None:
    path = d / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])


def overlapping_spans(d: Path) -> None:
    """Point layer 0's o_proj at q_proj's bytes (same size): two tensors share a span, a gap is left."""
    path = d / "model.safetensors"
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    q, o = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
    header[o]["data_offsets"] = list(header[q]["data_offsets"])
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data[8 + n:])


def edit_index(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        index = read_json(d, INDEX)
        change(index["weight_map"])
        write_json(d, INDEX, index)
    return apply


def map_shard_outside(weight_map: dict) -> None:
    for name, shard in weight_map.items():
        if shard == SHARD_2:
            weight_map[name] = "../" + SHARD_2


def map_one_to_wrong_shard(weight_map: dict) -> None:
    weight_map[next(n for n, s in weight_map.items() if s == SHARD_1)] = SHARD_2


def unlist_one(weight_map: dict) -> None:
    del weight_map[next(iter(weight_map))]


def pickle_only(d: Path) -> None:
    (d / "model.safetensors").unlink()
    # the first bytes of a pickle stream; the checks must list it, never load it
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)


def pickle_beside(d: Path) -> None:
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)


# ---- weights -------------------------------------------------------------------------------------------

def drop(name: str):
    return edit_tensors(lambda t, d: t.pop(name))


def add_tensor(t: dict, d: Path) -> None:
    t["model.layers.0.self_attn.q_proj.lora_A.weight"] = torch.zeros(8, 64) + 0.01


def one_value(name: str, value: float, where=(0, 0)):
    def change(t: dict, d: Path) -> None:
        t[name] = t[name].clone()
        t[name][where if t[name].dim() == 2 else where[0]] = value
    return edit_tensors(change)


def zero_tensor(name: str):
    def change(t: dict, d: Path) -> None:
        t[name] = torch.zeros_like(t[name])
    return edit_tensors(change)


def scale_tensor(name: str, factor: float):
    def change(t: dict, d: Path) -> None:
        t[name] = t[name] * factor
    return edit_tensors(change)


def sinks_per_kv_head(t: dict, d: Path) -> None:
    """gpt-oss sinks stored per kv-head ([2]) instead of per query head ([4])."""
    t["model.layers.1.self_attn.sinks"] = t["model.layers.1.self_attn.sinks"][:2].clone()


def gpt_oss_rope(**changes):
    def apply(d: Path) -> None:
        config = read_json(d, "config.json")
        rope = config["rope_scaling"]
        for key, value in changes.items():
            rope.pop(key) if value is DELETE else rope.__setitem__(key, value)
        write_json(d, "config.json", config)
    return apply


def to_bf16(name: str):
    def change(t: dict, d: Path) -> None:
        t[name] = t[name].to(torch.bfloat16)
    return edit_tensors(change)


# ---- vocab ---------------------------------------------------------------------------------------------

def add_tokens_beyond(d: Path) -> None:
    """Four added tokens past the embedding (transformers#26714: len(tok) 32004 vs 32000 rows)."""
    tok = read_json(d, "tokenizer.json")
    top = max(t["id"] for t in tok["added_tokens"])
    for k in range(1, 5):
        tok["added_tokens"].append({"id": top + k, "content": f"<|new_{k}|>", "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    write_json(d, "tokenizer.json", tok)


def added_id(token_id: int):
    """An added token with a far id: every check must stay O(vocab), never O(max id)."""
    def change(tok: dict) -> None:
        tok["added_tokens"].append({"id": token_id, "content": "<|far|>", "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
    return change


def resize_rows(rows: int):
    """Resize embedding and lm_head to `rows` (copying what fits) and set config.vocab_size to match."""
    def change(t: dict, d: Path) -> None:
        for name in (EMBED, LM_HEAD):
            old = t[name]
            new = torch.randn(rows, old.shape[1], generator=torch.Generator().manual_seed(1)) * 0.02
            keep = min(rows, old.shape[0])
            new[:keep] = old[:keep]
            t[name] = new.to(old.dtype)
        config = read_json(d, "config.json")
        config["vocab_size"] = rows
        write_json(d, "config.json", config)
    return edit_tensors(change)


def no_eos_anywhere(d: Path) -> None:
    edit_json("config.json", eos_token_id=DELETE)(d)
    edit_json("generation_config.json", eos_token_id=DELETE)(d)
    edit_json("tokenizer_config.json", eos_token=DELETE)(d)
    edit_json("special_tokens_map.json", eos_token=DELETE)(d)


def pad_is_eos(d: Path) -> None:
    edit_json("tokenizer_config.json", pad_token=IM_END)(d)
    edit_json("special_tokens_map.json", pad_token=IM_END)(d)
    eos = special_id(d, IM_END)
    edit_json("config.json", pad_token_id=eos)(d)
    edit_json("generation_config.json", pad_token_id=eos)(d)


def bos_disagrees(d: Path) -> None:
    edit_json("config.json", bos_token_id=special_id(d, EOS))(d)


def eos_not_a_stop(d: Path) -> None:
    edit_json("generation_config.json", eos_token_id=[special_id(d, EOS)])(d)
    edit_json("config.json", eos_token_id=special_id(d, EOS))(d)


def eos_out_of_range(d: Path) -> None:
    edit_json("generation_config.json", eos_token_id=99999)(d)


# ---- embeddings ----------------------------------------------------------------------------------------

def special_rows(change_row: Callable[[torch.Tensor, int], torch.Tensor], names=(EMBED, LM_HEAD),
                 tokens=(IM_START, IM_END)):
    def change(t: dict, d: Path) -> None:
        for name in names:
            t[name] = t[name].clone()
            for k, content in enumerate(tokens):
                i = special_id(d, content)
                t[name][i] = change_row(t[name][i], k)
    return edit_tensors(change)


SHARED_ROW = torch.randn(64, generator=torch.Generator().manual_seed(7)) * 0.02


def mean_rows(d: Path) -> None:
    """<|im_start|>/<|im_end|> set to the mean of the other rows (unsloth's fix_untrained_tokens, done by a
    previous tool): safe to train from, but not trained yet."""
    def change(t: dict, _: Path) -> None:
        ids = [special_id(d, IM_START), special_id(d, IM_END)]
        for name in (EMBED, LM_HEAD):
            keep = [i for i in range(t[name].shape[0]) if i not in ids]
            t[name] = t[name].clone()
            t[name][ids] = t[name][keep].double().mean(dim=0).to(t[name].dtype)
    edit_tensors(change)(d)


# ---- tokenizer -----------------------------------------------------------------------------------------

def unknown_merge(tok: dict) -> None:
    tok["model"]["merges"].append("zzq qxx")


def duplicate_id(tok: dict) -> None:
    vocab = tok["model"]["vocab"]
    vocab["Ġthe"] = vocab["Ġa"]


def drop_byte_token(byte: int):
    """Remove one base byte token (the factory corpus is English: no merge uses 0xE6 or 0x04)."""
    def change(tok: dict) -> None:
        del tok["model"]["vocab"][BYTES_TO_UNICODE[byte]]
    return change


def no_decoder(tok: dict) -> None:
    tok["decoder"] = None


def nfkc(tok: dict) -> None:
    tok["normalizer"] = {"type": "NFKC"}


def demote_special(tok: dict) -> None:
    """<|im_end|> leaves added_tokens and becomes an ordinary vocab entry: BPE splits its text."""
    entry = next(t for t in tok["added_tokens"] if t["content"] == IM_END)
    tok["added_tokens"].remove(entry)
    tok["model"]["vocab"][IM_END] = entry["id"]


CHAT_TEMPLATE_WITHOUT_BOS = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3_TEMPLATE = ("{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                   "{{ m['content'] }}<|eot_id|>{% endfor %}")


def scale_expert(layer: int, expert: int, factor: float):
    """One expert's three projections times `factor` (a merge that added an expert's delta twice)."""
    def change(t: dict, d: Path) -> None:
        for w in ("w1", "w2", "w3"):
            name = f"model.layers.{layer}.block_sparse_moe.experts.{expert}.{w}.weight"
            t[name] = t[name] * factor
    return edit_tensors(change)


FAULTS: list[Fault] = [
    # files
    Fault("config_missing", delete("config.json"), "FIL001", "error"),
    Fault("generation_config_not_json", write_text("generation_config.json", "{oops"), "FIL001", "error"),
    Fault("tokenizer_json_missing", delete("tokenizer.json"), "FIL001", "warning"),
    Fault("truncated_safetensors", truncate, "FIL002", "error", "truncated download"),
    Fault("overlapping_spans", overlapping_spans, "FIL002", "error", "safetensors header rules"),
    Fault("index_names_missing_shard", delete(SHARD_2), "FIL003", "error", base="sharded"),
    Fault("index_shard_path_escapes", edit_index(map_shard_outside), "FIL003", "error", "path traversal",
          base="sharded"),
    Fault("index_wrong_shard", edit_index(map_one_to_wrong_shard), "FIL003", "error", base="sharded"),
    Fault("index_omits_tensor", edit_index(unlist_one), "FIL003", "error", base="sharded"),
    Fault("pickle_only_weights", pickle_only, "FIL004", "error", "picklescan/modelscan bypasses"),
    Fault("pickle_beside_safetensors", pickle_beside, "FIL004", "warning"),
    # config
    Fault("config_not_json", write_text("config.json", "{\"architectures\": ["), "CFG001", "error"),
    Fault("unsupported_architecture", edit_json("config.json", architectures=["GPTNeoXForCausalLM"],
                                                model_type="gpt_neox"), "CFG001", "info"),
    Fault("kv_heads_do_not_divide", edit_json("config.json", num_key_value_heads=3), "CFG002", "error"),
    Fault("odd_head_dim", edit_json("config.json", head_dim=15), "CFG002", "error"),
    Fault("unknown_rope_type", edit_json("config.json", rope_scaling={"rope_type": "magic", "factor": 2.0}),
          "CFG003", "error", "unsloth PR#6197"),
    Fault("llama3_rope_missing_fields", edit_json("config.json", rope_scaling={"rope_type": "llama3", "factor": 8.0}),
          "CFG003", "error", "mlx-vlm PR#1710"),
    Fault("rope_factor_below_one", edit_json("config.json", rope_scaling={"type": "linear", "factor": 0.5}),
          "CFG003", "error"),
    Fault("model_max_length_beyond_positions", edit_json("tokenizer_config.json", model_max_length=4096),
          "CFG004", "warning"),
    Fault("zero_rms_norm_eps", edit_json("config.json", rms_norm_eps=0.0), "CFG005", "error"),
    Fault("no_positions", edit_json("config.json", max_position_embeddings=0), "CFG005", "error"),
    Fault("zero_rope_theta", edit_json("config.json", rope_theta=0.0), "CFG001", "error"),
    # long context (checks/long_context/, real-model faults in tests/checks/long_context/)
    Fault("yarn_without_original_length", edit_json("config.json", rope_scaling={"rope_type": "yarn", "factor": 4.0}),
          "CFG060", "warning"),
    Fault("rope_scaling_dropped", edit_json("config.json", max_position_embeddings=1024,
                                            original_max_position_embeddings=128), "CFG061", "warning",
          "unslothai/unsloth#6197"),
    Fault("layer_types_wrong_length", edit_json("config.json", layer_types=["full_attention"] * 3), "CFG062", "error"),
    Fault("window_on_every_layer", edit_json("config.json", sliding_window=64,
                                             layer_types=["sliding_attention"] * 2), "CFG063", "warning",
          "vllm#21863"),
    # weights
    Fault("missing_lm_head_untied", drop(LM_HEAD), "WGT001", "error", "tie_word_embeddings=false without lm_head"),
    Fault("missing_layer_tensor", drop("model.layers.1.mlp.up_proj.weight"), "WGT001", "error"),
    Fault("unmerged_lora_tensor", edit_tensors(add_tensor), "WGT002", "warning"),
    Fault("intermediate_size_wrong", edit_json("config.json", intermediate_size=96), "WGT003", "error"),
    Fault("mixed_dtypes", to_bf16("model.layers.1.mlp.down_proj.weight"), "WGT004", "warning"),
    Fault("torch_dtype_mislabelled", edit_json("config.json", torch_dtype="bfloat16"), "WGT004", "warning",
          "vllm#14126"),
    Fault("one_nan_in_one_layer", one_value("model.layers.1.mlp.down_proj.weight", float("nan")), "WGT005",
          "error", "vllm#14126"),
    Fault("inf_in_final_norm", one_value("model.norm.weight", float("inf")), "WGT005", "error"),
    Fault("zeroed_projection", zero_tensor("model.layers.0.self_attn.o_proj.weight"), "WGT006", "error"),
    Fault("layer_out_of_scale", scale_tensor("model.layers.2.mlp.up_proj.weight", 1000.0), "WGT007", "warning",
          base="deep"),
    Fault("weight_beyond_float16", one_value("model.layers.0.mlp.gate_proj.weight", 1e5), "WGT008", "warning",
          "onnxruntime-genai PR#2444"),
    # vocab
    Fault("added_tokens_beyond_embedding", add_tokens_beyond, "VOC002", "error", "transformers#26714"),
    Fault("added_token_with_huge_id", edit_tokenizer(added_id(10**7)), "VOC002", "error", "inseq PR#306"),
    Fault("added_token_id_past_any_vocab", edit_tokenizer(added_id(10**9)), "TOK001", "error"),   # limits.py
    Fault("config_vocab_smaller_than_tokenizer", resize_rows(500), "VOC002", "error", "inseq PR#306"),
    Fault("padded_rows_beyond_tokenizer", resize_rows(576), "VOC003", "warning", "vllm#13175"),
    Fault("eos_id_out_of_range", eos_out_of_range, "VOC004", "error"),
    Fault("eos_token_not_in_vocab", both(edit_json("tokenizer_config.json", eos_token="<|eot|>"),
                                         edit_json("special_tokens_map.json", eos_token="<|eot|>")),
          "VOC004", "error"),
    Fault("bos_ids_disagree", bos_disagrees, "VOC005", "warning"),
    Fault("tokenizer_eos_not_a_stop_id", eos_not_a_stop, "VOC005", "warning"),
    Fault("special_map_disagrees", edit_json("special_tokens_map.json", eos_token=EOS), "VOC005", "warning"),
    Fault("no_eos_anywhere", no_eos_anywhere, "VOC006", "error"),
    Fault("pad_is_eos", pad_is_eos, "VOC007", "info", "transformers#25790"),
    # embeddings
    Fault("zeroed_special_rows", special_rows(lambda r, k: torch.zeros_like(r)), "EMB001", "warning",
          "meta-llama/llama3#77"),
    Fault("near_zero_special_rows", special_rows(lambda r, k: r * 1e-7), "EMB001", "warning", "unsloth#1056"),
    Fault("zeroed_lm_head_rows_only", special_rows(lambda r, k: torch.zeros_like(r), names=(LM_HEAD,)), "EMB001",
          "warning", "unsloth#658"),
    Fault("untrained_special_rows", special_rows(lambda r, k: r * 0.01), "EMB002", "warning", "unsloth#1056"),
    Fault("identical_special_rows", special_rows(lambda r, k: SHARED_ROW.to(r.dtype)), "EMB003", "warning",
          "axolotl#1666"),
    Fault("mean_initialised_special_rows", mean_rows, "EMB005", "warning", "unsloth fix_untrained_tokens"),
    Fault("huge_embedding_row", special_rows(lambda r, k: r * 100.0, tokens=(PAD,), names=(EMBED,)), "EMB004",
          "warning"),
    # tokenizer
    Fault("tokenizer_json_not_json", write_text("tokenizer.json", "{\"model\": "), "TOK001", "error"),
    Fault("merge_with_unknown_token", edit_tokenizer(unknown_merge), "TOK002", "error"),
    Fault("two_tokens_one_id", edit_tokenizer(duplicate_id), "TOK003", "error"),
    Fault("utf8_lead_byte_missing", edit_tokenizer(drop_byte_token(0xE6)), "TOK004", "error"),
    Fault("control_byte_missing", edit_tokenizer(drop_byte_token(0x04)), "TOK004", "info"),
    Fault("decoder_missing", edit_tokenizer(no_decoder), "TOK005", "error", "llama.cpp#3502"),
    Fault("nfkc_normalizer", edit_tokenizer(nfkc), "TOK005", "info"),
    Fault("special_token_not_atomic", edit_tokenizer(demote_special), "TOK006", "error"),
    Fault("chat_template_raises", edit_json("tokenizer_config.json",
                                            chat_template="{{ raise_exception('no chat here') }}"), "TOK008", "error"),
    Fault("chat_template_syntax_error", edit_json("tokenizer_config.json", chat_template="{% for m in %}"),
          "TOK008", "error"),
    Fault("no_chat_template", edit_json("tokenizer_config.json", chat_template=DELETE), "TOK008", "info"),
    Fault("role_tokens_not_in_vocab", edit_json("tokenizer_config.json", chat_template=LLAMA3_TEMPLATE), "TOK009",
          "warning"),
    Fault("padding_side_right", edit_json("tokenizer_config.json", padding_side="right"), "TOK010", "info",
          "transformers#25790"),
    # mixture of experts and conversions
    Fault("moe_topk_exceeds_experts", edit_json("config.json", num_experts_per_tok=5), "MOE001", "error",
          "torch.topk: selected index k out of range", base="mixtral"),
    Fault("moe_config_claims_more_experts", edit_json("config.json", num_local_experts=6), "MOE001", "error",
          "pruned MoE with a stale config", base="mixtral"),
    Fault("moe_expert_scaled_x100", scale_expert(1, 2, 100.0), "MOE002", "warning", base="mixtral"),
    Fault("gemma2_final_softcap_lost", edit_json("config.json", final_logit_softcapping=None), "CNV002", "warning",
          "Gemma 2 exports without soft-capping (llama.cpp#8197)", base="gemma2"),
    # gpt-oss (CFG010-CFG014)
    Fault("gpt_oss_swiglu_limit_zero", edit_json("config.json", swiglu_limit=0.0), "CFG010", "error",
          "onnxruntime#27221", base="gpt_oss"),
    Fault("gpt_oss_swiglu_limit_null", edit_json("config.json", swiglu_limit=None), "CFG010", "error",
          base="gpt_oss"),
    Fault("gpt_oss_swiglu_alpha_negative", edit_json("config.json", swiglu_alpha=-1.702), "CFG010", "error",
          base="gpt_oss"),
    Fault("gpt_oss_swiglu_limit_missing", edit_json("config.json", swiglu_limit=DELETE), "CFG010", "warning",
          "onnxruntime#27221", base="gpt_oss"),
    Fault("gpt_oss_layer_types_short", edit_json("config.json", layer_types=["sliding_attention"]), "CFG011",
          "error", base="gpt_oss"),
    Fault("gpt_oss_layer_types_unknown", edit_json("config.json", layer_types=["sliding_attention", "chunked"]),
          "CFG011", "error", base="gpt_oss"),
    Fault("gpt_oss_sliding_without_window", edit_json("config.json", sliding_window=None), "CFG011", "error",
          base="gpt_oss"),
    Fault("gpt_oss_experts_per_token_disagree", edit_json("config.json", experts_per_token=3), "CFG012", "error",
          base="gpt_oss"),
    Fault("gpt_oss_topk_beyond_experts", edit_json("config.json", num_experts_per_tok=9, experts_per_token=9),
          "CFG012", "error", base="gpt_oss"),
    Fault("gpt_oss_sinks_per_kv_head", edit_tensors(sinks_per_kv_head), "CFG013", "error", "vllm#28561",
          base="gpt_oss"),
    Fault("gpt_oss_sinks_zeroed", zero_tensor("model.layers.0.self_attn.sinks"), "WGT006", "error",
          base="gpt_oss"),
    Fault("gpt_oss_rope_scaling_dropped", edit_json("config.json", rope_scaling=DELETE), "CFG014", "warning",
          base="gpt_oss"),
    Fault("gpt_oss_yarn_truncate_missing", gpt_oss_rope(truncate=DELETE), "CFG014", "warning", base="gpt_oss"),
]
