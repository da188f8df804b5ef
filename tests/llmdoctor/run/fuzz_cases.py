"""Hostile model directories for the size fuzz test, and the in-process worker that runs them.

    python -m tests.llmdoctor.run.fuzz_cases OUT.json --seed 18 --cases 300 --rlimit-gib 3 [--engine 6]

The worker sets RLIMIT_AS first (so a size taken at its word raises MemoryError instead of paging the box to
death), builds one tiny healthy model, then for each case copies it, applies 1-3 seeded mutations (huge,
negative, zero, float, string, nested sizes in config.json; tokenizer.json vocab/merges/added tokens;
safetensors headers; tokenizer_config/generation_config; a sharded index) and runs `llmdoctor.check` with
the static selection, rendering the report as JSON and as a table the way the CLI does. It writes one record
per case: what was mutated, the checks that crashed, and any exception that escaped.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import struct
import sys
import time
from pathlib import Path

STATIC = "files,config,weights,vocab,embeddings,tokenizer"
ENGINE = "golden,activations,kv_cache,numerics,generation,selftest"
HUGE = [10**9, 10**12, 10**18, 2**63, 2**64 + 1, 10**40, 1 << 31, 1 << 27, 50_000_000]
ODD = [-1, 0, -10**12, 1.5, 1e308, -0.0, "32", "1e9", None, True, [], {}, [[[64]]], {"a": {"b": [1]}}, "",
       float("inf"), float("nan")]
CONFIG_SIZES = ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "num_local_experts",
                "num_experts", "num_experts_per_tok", "moe_intermediate_size", "sliding_window",
                "original_max_position_embeddings", "n_layer", "n_embd", "n_positions", "max_window_layers"]
CONFIG_OTHER = ["rms_norm_eps", "rope_theta", "bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings",
                "torch_dtype", "attention_bias", "mlp_bias", "rope_scaling", "rope_parameters", "layer_types",
                "mlp_only_layers", "text_config", "architectures", "model_type", "quantization_config",
                "use_sliding_window", "decoder_sparse_step", "partial_rotary_factor"]
ARCHS = ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM",
         "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "OlmoeForCausalLM", "Gemma2ForCausalLM",
         "Gemma3ForCausalLM", "Phi3ForCausalLM", "GPT2LMHeadModel"]


def value(rng: random.Random):
    return rng.choice(HUGE) if rng.random() < 0.6 else rng.choice(ODD)


def junk(rng: random.Random, depth: int = 0):
    """Nested junk: deep lists, wide lists, dicts of junk, odd scalars."""
    kind = rng.randrange(5)
    if kind == 0:
        deep: object = 1
        for _ in range(rng.choice([10, 200, 900])):
            deep = [deep]
        return deep
    if kind == 1:
        return [rng.choice(HUGE + ODD[:8]) for _ in range(rng.choice([3, 1000, 20_000]))]
    if kind == 2 and depth < 3:
        return {rng.choice(["factor", "rope_type", "type", "x", "original_max_position_embeddings"]):
                junk(rng, depth + 1) for _ in range(rng.randrange(1, 4))}
    return value(rng)


# ---- mutations: each edits a model directory in place and returns a short description ---------------------
def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, allow_nan=True), encoding="utf-8")


def m_config_size(d: Path, rng: random.Random) -> str:
    cfg = read_json(d / "config.json")
    key, v = rng.choice(CONFIG_SIZES), value(rng)
    cfg[key] = v
    write_json(d / "config.json", cfg)
    return f"config {key}={v!r:.40}"


def m_config_other(d: Path, rng: random.Random) -> str:
    cfg = read_json(d / "config.json")
    key = rng.choice(CONFIG_OTHER)
    cfg[key] = junk(rng) if rng.random() < 0.5 else value(rng)
    write_json(d / "config.json", cfg)
    return f"config {key}=<{type(cfg[key]).__name__}>"


def m_config_moe(d: Path, rng: random.Random) -> str:
    """Another architecture (MoE, Gemma, Phi, unknown) with hostile expert counts on the llama tensors."""
    cfg = read_json(d / "config.json")
    arch = rng.choice(ARCHS)
    cfg["architectures"] = [arch]
    for key in ("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if rng.random() < 0.6:
            cfg[key] = rng.choice(HUGE + [1, 2, 8, 0, -1, "8"])
    write_json(d / "config.json", cfg)
    return f"config arch={arch} experts={cfg.get('num_experts', cfg.get('num_local_experts'))!r:.30}"


def m_layers_claim(d: Path, rng: random.Random) -> str:
    """The issue's case and its neighbours: more layers declared than stored, within and past the bound."""
    cfg = read_json(d / "config.json")
    cfg["num_hidden_layers"] = rng.choice([3, 64, 1000, 1024, 1025, 10**6, 10**9, 10**18])
    write_json(d / "config.json", cfg)
    return f"config num_hidden_layers={cfg['num_hidden_layers']}"


def m_tokenizer(d: Path, rng: random.Random) -> str:
    tok = read_json(d / "tokenizer.json")
    model, kind = tok.setdefault("model", {}), rng.randrange(8)
    vocab = model.get("vocab") if isinstance(model.get("vocab"), dict) else {}
    if kind == 0 and vocab:                              # one id huge / negative / odd
        key = rng.choice(sorted(vocab))
        vocab[key] = value(rng)
        what = f"vocab[{key!r}]={vocab[key]!r:.30}"
    elif kind == 1:                                      # added token with a huge id
        tok.setdefault("added_tokens", []).append({"id": rng.choice(HUGE), "content": "<huge>", "special": True,
                                                   "single_word": False, "lstrip": False, "rstrip": False,
                                                   "normalized": False})
        what = "added_tokens id huge"
    elif kind == 2:                                      # vocab replaced by junk
        model["vocab"] = junk(rng)
        what = f"vocab=<{type(model['vocab']).__name__}>"
    elif kind == 3:                                      # merges replaced by junk / wide lists
        model["merges"] = rng.choice([junk(rng), [["a", "b"]] * 20_000, [[1, 2]] * 10, ["a b c"] * 5, [None]])
        what = "merges junk"
    elif kind == 4 and vocab:                            # many ids spread up to 10**12
        for i in range(rng.choice([10, 5000])):
            vocab[f"x{i}"] = rng.randrange(10**12)
        what = "vocab sparse huge ids"
    elif kind == 5:
        tok["added_tokens"] = junk(rng)
        what = "added_tokens junk"
    elif kind == 6:
        model["type"] = rng.choice(["WordPiece", "Unigram", "WordLevel", "BPE", None, 7])
        if model["type"] == "Unigram":
            model["vocab"] = [["a", 0.0]] * rng.choice([1, 20_000])
        what = f"model.type={model['type']!r}"
    else:
        tok[rng.choice(["pre_tokenizer", "normalizer", "decoder", "post_processor"])] = junk(rng)
        what = "pipeline component junk"
    write_json(d / "tokenizer.json", tok)
    return f"tokenizer {what}"


def m_tokenizer_config(d: Path, rng: random.Random) -> str:
    from reference_engine.testing.factory import CHAT_TEMPLATE
    cfg = read_json(d / "tokenizer_config.json")
    cfg["chat_template"] = CHAT_TEMPLATE        # the base has none (compiling it costs half a healthy run)
    key = rng.choice(["model_max_length", "added_tokens_decoder", "bos_token", "eos_token", "chat_template",
                      "add_bos_token", "pad_token"])
    if key == "added_tokens_decoder":
        cfg[key] = {str(rng.choice(HUGE)): {"content": "<x>", "special": True}, "-5": {"content": "<y>"}}
    else:
        cfg[key] = junk(rng) if rng.random() < 0.4 else value(rng)
    write_json(d / "tokenizer_config.json", cfg)
    return f"tokenizer_config {key}"


def m_generation_config(d: Path, rng: random.Random) -> str:
    cfg = read_json(d / "generation_config.json")
    key = rng.choice(["max_new_tokens", "max_length", "eos_token_id", "bos_token_id", "top_k", "num_beams"])
    cfg[key] = rng.choice([value(rng), [rng.choice(HUGE)] * 3, junk(rng)])
    write_json(d / "generation_config.json", cfg)
    return f"generation_config {key}"


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path: Path, header: dict, data: bytes, declared_len: int | None = None) -> None:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text) if declared_len is None else declared_len) + text + data)


def m_safetensors(d: Path, rng: random.Random) -> str:
    path = d / "model.safetensors"
    header, data = read_safetensors(path)
    names = sorted(k for k in header if k != "__metadata__")
    name, kind = rng.choice(names), rng.randrange(8)
    if kind == 0:                                        # a shape claim the bytes do not back
        header[name]["shape"] = [rng.choice(HUGE), *header[name]["shape"][1:]]
        what = f"{name} shape huge"
    elif kind == 1:                                      # zero-size tensor with a giant dimension, consistent
        end = len(data)
        header[rng.choice(["model.embed_tokens.weight", "lm_head.weight", "model.layers.999999999.mlp.x",
                           "zero"])] = {"dtype": "F32", "shape": [rng.choice(HUGE), 0], "data_offsets": [end, end]}
        what = "zero-size giant tensor"
    elif kind == 2:                                      # layer indices renamed far away
        header = {(k.replace("layers.1.", f"layers.{rng.choice(HUGE)}.") if k.startswith("model.layers.1.")
                   else k): v for k, v in header.items()}
        what = "layer 1 renamed to a huge index"
    elif kind == 3:
        header[name]["data_offsets"] = [0, rng.choice(HUGE)]
        what = f"{name} offsets huge"
    elif kind == 4:
        header[name]["dtype"] = rng.choice(["F8_E4M3", "I64", "Q4_K", 5, None])
        what = f"{name} dtype odd"
    elif kind == 5:
        header["__metadata__"] = junk(rng)
        what = "metadata junk"
    elif kind == 6:
        write_safetensors(path, header, data, declared_len=rng.choice([2**63, 2**64 - 1, 10**8, 0]))
        return "safetensors header length huge"
    else:
        header[name]["shape"] = [value(rng) for _ in range(rng.choice([1, 2, 64]))]
        what = f"{name} shape junk"
    write_safetensors(path, header, data)
    return f"safetensors {what}"


def m_index(d: Path, rng: random.Random) -> str:
    """A sharded index whose shard names / counts / sizes are hostile."""
    header, _ = read_safetensors(d / "model.safetensors")
    names = [k for k in header if k != "__metadata__"]
    kind = rng.randrange(3)
    if kind == 0:
        wm = {n: f"model-{i + 1:05d}-of-{rng.choice(HUGE)}.safetensors" for i, n in enumerate(names)}
    elif kind == 1:
        wm = {n: "model.safetensors" for n in names}
        wm.update({f"model.layers.{i}.x": "model.safetensors" for i in range(rng.choice([10, 20_000]))})
    else:
        wm = junk(rng)
    write_json(d / "model.safetensors.index.json", {"metadata": {"total_size": rng.choice(HUGE)}, "weight_map": wm})
    return f"index kind {kind}"


# engine cases: sizes that pass the parse bounds but must still be refused before the engine allocates
ENGINE_SIZES = [("max_position_embeddings", 100_000_000), ("num_hidden_layers", 1000), ("head_dim", 8192),
                ("max_position_embeddings", 10**12), ("vocab_size", 10_000_000), ("num_key_value_heads", 4096)]


def m_engine_size(d: Path, index: int) -> str:
    cfg = read_json(d / "config.json")
    key, v = ENGINE_SIZES[index % len(ENGINE_SIZES)]
    cfg[key] = v
    write_json(d / "config.json", cfg)
    return f"config {key}={v}"


MUTATIONS = [(m_config_size, 5), (m_config_other, 3), (m_config_moe, 2), (m_layers_claim, 2), (m_tokenizer, 4),
             (m_tokenizer_config, 2), (m_generation_config, 1), (m_safetensors, 4), (m_index, 1)]


# the first cases walk every declared size through every hostile kind, so coverage does not hang on the seed
SYSTEMATIC = [(key, v) for key in CONFIG_SIZES for v in (10**9, 10**18, -1, 0, 1.5, "32", [[[64]]])] + \
    [("num_hidden_layers", n) for n in (3, 1000, 1024, 1025)]      # more layers than stored, within the bound


def m_systematic(d: Path, index: int) -> str:
    cfg = read_json(d / "config.json")
    key, v = SYSTEMATIC[index]
    cfg[key] = v
    write_json(d / "config.json", cfg)
    return f"config {key}={v!r}"


def mutate(d: Path, rng: random.Random, index: int = -1) -> list[str]:
    if 0 <= index < len(SYSTEMATIC):
        return [m_systematic(d, index)]
    funcs, weights = zip(*MUTATIONS)
    return [rng.choices(funcs, weights)[0](d, rng) for _ in range(rng.choice([1, 1, 2, 3]))]


# ---- the worker ---------------------------------------------------------------------------------------------
def run_case(d: Path, select: str) -> dict:
    import llmdoctor
    from reference_engine.budget.plan import PlanError
    from reference_engine.errors import ModelDirError
    from reports import render
    out: dict = {"escaped": None, "crashed": [], "refused": None}
    try:
        report = llmdoctor.check(d, select=select, use_config=False)
        for fmt in ("json", "table"):
            render(report, fmt, io.StringIO())
        out["crashed"] = [f"{r.id}: {r.reason[:200]}" for r in report.checks if r.status == "crashed"]
        out["findings"] = sorted({f.check for f in report.findings})
        out["engine"] = next((r.reason for r in report.checks if r.status == "skipped"
                              and r.reason.startswith(("needs engine", "needs config"))
                              and r.category in ENGINE.split(",")), None)
    # a one-line input error, or a memory plan that refuses before anything is loaded (both exit 2 in the CLI),
    # is a clean outcome: under the worker's address-space limit an absurd declared size is refused by the plan
    except (ModelDirError, PlanError) as e:
        out["refused"] = str(e)[:200]
    except BaseException as e:  # noqa: BLE001 - exactly what the test is looking for
        out["escaped"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def peak_rss_kib() -> int:
    """This process's own peak RSS (VmHWM). Not ru_maxrss: Linux keeps that across execve, so a worker forked
    from a large pytest process would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--engine", type=int, default=0, help="extra cases with the engine checks")
    ap.add_argument("--rlimit-gib", type=float, default=3.0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--only", type=int, nargs="*", help="replay these case numbers (static cases only)")
    args = ap.parse_args(argv)
    limit = int(args.rlimit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from reference_engine.testing.factory import build_model_dir
    t0 = time.perf_counter()
    work = Path(args.workdir or os.environ.get("TMPDIR", "/tmp")) / f"fuzz18-{os.getpid()}"
    base = work / "base"
    build_model_dir(base, "llama", seed=1)
    tok_cfg = read_json(base / "tokenizer_config.json")
    tok_cfg.pop("chat_template", None)
    write_json(base / "tokenizer_config.json", tok_cfg)
    records, started = [], time.perf_counter()
    setup_s = started - t0
    plan = [(i, STATIC) for i in range(args.cases)] + [(-1 - i, f"{STATIC},{ENGINE}") for i in range(args.engine)]
    if args.only is not None:
        plan = [(i, STATIC) for i in args.only]
    try:
        for i, select in plan:
            rng = random.Random(args.seed * 100_003 + i)
            d = work / f"case{i}"
            shutil.copytree(base, d)
            what = [m_engine_size(d, -1 - i)] if i < 0 else mutate(d, rng, i)
            t = time.perf_counter()
            rec = {"case": i, "select": "engine" if select != STATIC else "static", "mutations": what,
                   **run_case(d, select), "seconds": round(time.perf_counter() - t, 3)}
            records.append(rec)
            shutil.rmtree(d, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        Path(args.out).write_text(json.dumps({"records": records, "total_s": time.perf_counter() - started,
                                              "setup_s": setup_s,
                                              "peak_rss_kib": peak_rss_kib()},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
