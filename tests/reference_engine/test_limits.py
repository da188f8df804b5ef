"""reference_engine/limits.py: declared sizes are bounded before use, believed only as far as the
files back them, and the engine refuses an allocation that cannot fit in one line before making it."""
from __future__ import annotations

import json

import pytest
import torch

from reference_engine import limits
from reference_engine.config import parse_config
from reference_engine.errors import ModelDirError
from reference_engine.limits import (MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, check_allocation, check_config_sizes,
                                     check_layers_present, check_rope_table, check_size, check_token_ids,
                                     layers_backed, present_layers)
from reference_engine.testing.factory import build_model_dir

LLAMA = {"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "max_position_embeddings": 128}


def test_check_size_accepts_in_range_and_names_the_field_otherwise():
    assert check_size("n", 7, 10, "f.json") == 7
    for bad, words in [(11, "above the sane limit of 10"), (0, "must be >= 1"), (1.5, "must be an integer"),
                       ("7", "must be an integer, found '7'"), (True, "must be an integer"),
                       (None, "must be an integer, found None"), ([[1]], "found list")]:
        with pytest.raises(ModelDirError) as e:
            check_size("n", bad, 10, "f.json")
        assert str(e.value).startswith("f.json: 'n' ") and words in str(e.value) and "\n" not in str(e.value)
    assert check_size("n", -5, 10, "f.json", minimum=None) == -5     # below: left to the CFG checks


@pytest.mark.parametrize("key, value", [("num_hidden_layers", 10**9), ("hidden_size", 10**12),
                                        ("intermediate_size", 2**63), ("num_attention_heads", 10**6),
                                        ("num_key_value_heads", 10**6), ("head_dim", 10**6),
                                        ("vocab_size", 10**12), ("max_position_embeddings", 10**12),
                                        ("num_local_experts", 10**9), ("moe_intermediate_size", 10**18),
                                        ("n_layer", 10**9)])
def test_parse_config_refuses_huge_declared_sizes_at_once(key, value):
    raw = {**LLAMA, key: value}
    if key == "n_layer":
        del raw["num_hidden_layers"]           # the GPT-2 spelling is bounded through its alias
    with pytest.raises(ModelDirError, match="above the sane limit"):
        parse_config(raw, "config.json")


@pytest.mark.parametrize("key, value", [("max_position_embeddings", "4096"), ("max_position_embeddings", None),
                                        ("max_position_embeddings", 1e9), ("rms_norm_eps", [1e-5]),
                                        ("rms_norm_eps", None), ("head_dim", "64"), ("vocab_size", 64.0)])
def test_parse_config_refuses_non_integer_sizes_in_one_line(key, value):
    with pytest.raises(ModelDirError) as e:
        parse_config({**LLAMA, key: value}, "config.json")
    assert f"'{key}' must be" in str(e.value)


def test_real_sizes_and_values_left_to_cfg_checks_still_parse():
    # the largest public shapes parse; a zero context or odd head_dim stays CFG005/CFG002's finding
    big = {**LLAMA, "num_hidden_layers": 126, "hidden_size": 16384, "intermediate_size": 53248,
           "num_attention_heads": 128, "num_key_value_heads": 8, "vocab_size": 262144,
           "max_position_embeddings": 10_485_760}
    assert parse_config(big).num_hidden_layers == 126
    assert parse_config({**LLAMA, "max_position_embeddings": 0}).max_position_embeddings == 0
    assert parse_config({**LLAMA, "head_dim": 3}).head_dim == 3
    assert parse_config({**LLAMA, "num_key_value_heads": None}).num_key_value_heads == 4
    check_config_sizes({**LLAMA, "num_experts": "8"}, "config.json")   # a string is the family's error


def test_rope_scaling_original_context_is_bounded():
    raw = {**LLAMA, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 10**15}}
    with pytest.raises(ModelDirError, match="rope_scaling.original_max_position_embeddings"):
        parse_config(raw)


def test_layers_present_come_from_the_tensor_names():
    names = ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight",
             "model.layers.7.x", "blk.3.ffn_up.weight", "model.layers.99999999999999999999.x"]
    assert present_layers(names) == [0, 1, 3, 7]                    # a 20-digit index is not an index
    assert present_layers(names, declared=2) == [0, 1]
    assert layers_backed(2, names) == 2 and layers_backed(10**9, names) == 8 and layers_backed(5, []) == 0
    check_layers_present(2, names, "m")
    with pytest.raises(ModelDirError, match=r"num_hidden_layers = 1000000000 but the weights hold tensors only "
                                            r"for layers 0\.\.7"):
        check_layers_present(10**9, names, "m")
    with pytest.raises(ModelDirError, match="for no decoder layer at all"):
        check_layers_present(2, ["model.norm.weight"], "m")


def test_allocation_is_compared_with_the_memory_available(monkeypatch):
    monkeypatch.setattr(limits, "available_bytes", lambda: 1 << 30)
    check_allocation("a table", 1 << 29, "config.json")
    with pytest.raises(ModelDirError) as e:
        check_allocation("the KV cache", 3 << 30, "config.json", "why")
    assert str(e.value) == ("config.json: the KV cache would need 3.0 GiB (why), more than the 1.0 GiB of memory "
                            "available")
    with pytest.raises(ModelDirError, match="RoPE table would need"):
        check_rope_table(MAX_POSITIONS, 128, "config.json")
    with pytest.raises(ModelDirError, match="no positions"):
        check_rope_table(0, 128, "config.json")
    monkeypatch.setattr(limits, "available_bytes", lambda: None)    # nothing readable: nothing refused
    check_allocation("a table", 1 << 60, "config.json")


def test_available_bytes_sees_the_address_space_limit():
    free = limits.available_bytes()
    assert free is None or free > 0
    # the cgroup/rlimit readers never raise, whatever the machine has
    limits.cgroup_left(), limits._address_space_left(), limits.meminfo_available()


@pytest.mark.parametrize("v2, stat", [
    (True, "anon 1000\nfile 3000\nfile_dirty 200\nfile_writeback 100\n"),
    (False, "cache 9\ntotal_cache 3000\ntotal_dirty 200\ntotal_writeback 100\ntotal_rss 1000\n")])
def test_cgroup_room_counts_clean_page_cache_as_free(tmp_path, v2, stat):
    """Weights the static checks read through a memory map fill the cgroup with page cache; the kernel
    drops clean cache before it kills anything, so it must not make a later allocation look impossible."""
    limit, usage, stat_file = tmp_path / "limit", tmp_path / "usage", tmp_path / "stat"
    limit.write_text("10000\n"), usage.write_text("4000\n"), stat_file.write_text(stat)
    assert limits._limit_minus_usage(limit, usage, stat_file, v2) == 10000 - (4000 - 2700)
    assert limits._limit_minus_usage(limit, usage, tmp_path / "missing", v2) == 6000   # no stat: usage as is
    limit.write_text("max\n")
    assert limits._limit_minus_usage(limit, usage, stat_file, v2) is None


def test_token_ids_are_bounded():
    check_token_ids([{0: "a", 511: "b"}, {512: "<s>"}], "tokenizer.json")
    for ids, words in [({10**12: "x"}, "largest token id"), ({-1: "x"}, "smallest token id")]:
        with pytest.raises(ModelDirError, match=words):
            check_token_ids([ids], "tokenizer.json")
    assert MAX_VOCAB == limits.MAX_TOKENIZER_VOCAB and MAX_LAYERS >= 126


def test_tokenizer_with_a_huge_id_is_a_one_line_error(tmp_path):
    from reference_engine.tokenizer.tokenizer import Tokenizer
    root = build_model_dir(tmp_path / "m", "llama", seed=1)
    spec = json.loads((root / "tokenizer.json").read_text())
    spec["added_tokens"].append({"id": 10**12, "content": "<huge>", "special": True, "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False})
    (root / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ModelDirError, match="largest token id' is 1000000000000, above the sane limit"):
        Tokenizer.from_pretrained(root)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp("limits") / "m", "llama", seed=1)


def edited(tiny, tmp_path, **changes):
    import shutil
    root = tmp_path / "edited"
    shutil.copytree(tiny, root)
    cfg = json.loads((root / "config.json").read_text())
    cfg.update(changes)
    (root / "config.json").write_text(json.dumps(cfg))
    return root


def test_engine_refuses_more_layers_than_stored_before_sizing(tiny, tmp_path):
    from reference_engine.engine import Engine
    root = edited(tiny, tmp_path, num_hidden_layers=1000)
    with pytest.raises(ModelDirError, match="num_hidden_layers = 1000 but the weights hold tensors only for "
                                            r"layers 0\.\.1"):
        Engine.from_pretrained(root)


def test_engine_refuses_a_rope_table_or_cache_that_cannot_fit(tiny, tmp_path, monkeypatch):
    from reference_engine.engine import Engine
    root = edited(tiny, tmp_path, max_position_embeddings=100_000_000)
    if (limits.available_bytes() or 0) > 40 << 30:
        monkeypatch.setattr(limits, "available_bytes", lambda: 8 << 30)
    engine = Engine.from_pretrained(root)        # the table's rows are built as positions reach them
    assert engine.core.rope.cos.shape[0] < 100_000
    with pytest.raises(ModelDirError, match=r"the RoPE table would need .* \(positions \d+\.\.\d+ of "
                                            r"max_position_embeddings 100000000 x head_dim 16\)"):
        engine.core.rope.lookup(torch.tensor([99_999_999]))
    monkeypatch.undo()
    # the tiny model's RoPE table (~100 KB) fits a 300 KB budget, its default KV cache (512 KB) does not
    monkeypatch.setattr(limits, "available_bytes", lambda: 300 << 10)
    with pytest.raises(ModelDirError, match=r"config.json: the default KV cache would need 512.0 KiB"):
        Engine.from_pretrained(tiny)


def test_shard_and_tensor_counts_of_an_index_are_bounded_before_any_lookup(tiny, tmp_path, monkeypatch):
    import reference_engine.files.weights as weights_mod
    root = edited(tiny, tmp_path)
    names = weights_mod.Weights.open(root).names
    weight_map = {n: f"model-{i:05d}-of-99999.safetensors" for i, n in enumerate(names)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    monkeypatch.setattr(weights_mod, "MAX_SHARDS", 4)
    with pytest.raises(ModelDirError, match=f"'number of shards in weight_map' is {len(names)}, above the sane "
                                            f"limit of 4"):
        weights_mod.Weights.open(root)
    monkeypatch.setattr(weights_mod, "MAX_TENSORS", 3)
    with pytest.raises(ModelDirError, match="'number of tensors in weight_map' is"):
        weights_mod.Weights.open(root)


def test_merges_must_be_a_bounded_list(monkeypatch):
    import reference_engine.tokenizer.models.bpe as bpe
    vocab = {"a": 0, "b": 1, "ab": 2}
    with pytest.raises(ModelDirError, match="model.merges must be a list, found int"):
        bpe.parse_merges(5, vocab, None, "tokenizer.json")
    monkeypatch.setattr(bpe, "MAX_MERGES", 1)
    with pytest.raises(ModelDirError, match="'number of model.merges' is 2, above the sane limit of 1"):
        bpe.parse_merges(["a b", "a b"], vocab, None, "tokenizer.json")


HEAP_PROBE = """
import sys, torch
from reference_engine.limits import return_freed_memory_to_os
def rss():
    return int(open('/proc/self/status').read().split('RssAnon:')[1].split()[0]) * 1024
if sys.argv[1] == 'fixed':
    assert return_freed_memory_to_os()
torch.empty(8 << 20, dtype=torch.uint8).fill_(1)       # mapped, freed: glibc raises its threshold to 8 MiB
before = rss()
held = [torch.empty(8 << 20, dtype=torch.uint8).fill_(1) for _ in range(12)]
pin = torch.empty(8 << 20, dtype=torch.uint8).fill_(1)   # kept: the heap cannot trim what lies below it
del held
print(rss() - before)
"""


def test_freed_layers_go_back_to_the_os_once_the_threshold_is_fixed():
    import subprocess
    import sys
    left = {mode: int(subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], capture_output=True, text=True,
                                     check=True).stdout) for mode in ("default", "fixed")}
    assert left["fixed"] < 16 << 20             # 96 MiB allocated and freed: given back (8 MiB pinned)
    assert left["default"] > 64 << 20           # glibc's default keeps them in the heap (why this exists)


def test_release_pages_returns_a_dead_buffer_to_the_os():
    import torch
    from reference_engine.limits import release_pages

    def anon():
        return int(open("/proc/self/status").read().split("RssAnon:")[1].split()[0]) * 1024
    pool = torch.empty(64 << 20, dtype=torch.uint8)
    pool.fill_(7)
    before = anon()
    assert release_pages(pool)
    assert before - anon() > 56 << 20                  # the pages are gone...
    assert int(pool[1 << 20]) == 0                     # ...and read as zeros until written again
    pool[1 << 20] = 3
    assert int(pool[1 << 20]) == 3
