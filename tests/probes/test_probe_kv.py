"""`llmdoctor probe kv`: known-answer simulations through the engine's own paged KV cache."""
from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from probes.kv import ModelKv, kv_findings, run_kv_probe
from probes.kv_sim import BookkeepingCache, SimConfig, largest_free_run, simulate
from probes.kv_workload import Request, SyntheticSpec, load_trace, synthetic, write_trace
from reference_engine.errors import ModelDirError
from reference_engine.core.cache.kv_cache import PagedKVCache


@pytest.fixture
def tiny_model_dir(factory_model_dir):
    return factory_model_dir("llama")


def test_probe_drives_the_engines_cache_class():
    cache = BookkeepingCache(8, 4)
    assert isinstance(cache, PagedKVCache) and type(cache).compact is PagedKVCache.compact
    assert type(cache).append is PagedKVCache.append and type(cache).stats is PagedKVCache.stats


def test_hand_computed_trace():
    # block 4, pool 8 blocks, 1 decode step per 1-second tick; see the tick-by-tick account below
    trace = [Request(0.0, 3, 2), Request(0.0, 4, 1), Request(1.0, 9, 3)]
    result = simulate(trace, SimConfig(4, 8, tick_tokens=1, step_s=1.0, compaction=False, cross_check=True))
    line = result.timeline
    # t0: A=3 tok [1 blk], B=4 [1]            t1: C admitted 9 [3], A 4 [1], B 5 [2] finishes
    # t2: B freed, A 5 [2] finishes, C 10 [3]  t3: A freed, C 11   t4: C 12 finishes   t5: C freed
    assert line["used_blocks"] == [2, 6, 5, 3, 3, 0]
    assert line["live_tokens"] == [7, 18, 15, 11, 12, 0]
    assert line["internal_fragmentation"] == [1, 6, 5, 1, 0, 0]
    assert line["running"] == [2, 2, 1, 1, 0, 0]
    assert result.summary["completed"] == 3 and result.summary["preemptions"] == 0
    assert result.validation == []  # every sample agreed with cache.stats() and cache.validate()


@pytest.mark.parametrize("trace, tick", [
    ([Request(i * 5.0, 16, 0) for i in range(20)], 16),            # prefill-only: exactly one block each
    ([Request(i * 0.5, 16, 32) for i in range(50)], 16),            # grows a whole block per tick
])
def test_requests_of_whole_blocks_have_zero_internal_fragmentation(trace, tick):
    result = simulate(trace, SimConfig(16, 64, tick_tokens=tick, compaction=False, cross_check=True))
    assert max(result.timeline["live_tokens"]) > 0
    assert set(result.timeline["internal_fragmentation"]) == {0} and result.summary["waste_ratio"] == 0.0
    assert result.validation == []


def test_paged_vs_contiguous_saving_on_a_known_workload():
    trace = [Request(10.0 * i, 100, 0) for i in range(10)]  # one 100-token sequence live at a time
    result = run_kv_probe(trace, "known", pool_tokens=4096, max_len=1024)
    mean = {r.config.label: r.summary["mean_reserved_tokens"] for r in result.runs}
    # each live sample reserves 100 (block 1), 112 (7 x 16), 256 (1 x 256) or 1024 (contiguous) tokens
    assert mean["block 1"] / mean["contiguous"] == pytest.approx(100 / 1024)
    assert mean["block 16"] / mean["contiguous"] == pytest.approx(112 / 1024)
    assert mean["block 256"] / mean["contiguous"] == pytest.approx(256 / 1024)
    comparison = kv_findings(result)[1]
    assert comparison.check == "KVC902"
    assert comparison.evidence["saving_vs_contiguous"] == pytest.approx(1 - 100 / 1024, abs=1e-4)
    assert comparison.evidence["runs"]["block 16"]["waste_ratio"] == pytest.approx(12 / 112, abs=1e-4)


def test_small_pool_refuses_and_preempts():
    trace = [Request(0.01 * i, 64, 256) for i in range(40)]
    result = simulate(trace, SimConfig(16, 64, tick_tokens=16, compaction=False, cross_check=True))
    s = result.summary
    assert s["completed"] == 40 and s["admissions_refused"] > 0 and s["preemptions"] > 0
    assert s["recomputed_tokens"] >= 64 * s["preemptions"]
    assert max(result.timeline["used_blocks"]) <= 64 and result.validation == []
    too_big = simulate([Request(0.0, 2000, 10)], SimConfig(16, 64))
    assert too_big.summary["rejected_too_long"] == 1 and too_big.summary["completed"] == 0


def test_compaction_moves_exactly_the_scattered_blocks():
    cache = BookkeepingCache(6, 4)
    for seq in ("a", "b", "c"):
        cache.allocate(seq, 8)          # two blocks each: the pool is full
    cache.free("a")
    cache.allocate("d", 8)              # d gets a's two blocks, in front of b and c
    for block in range(6):
        cache.k_pools[0][block] = block  # tag each block's data with its id
    tables = {s: cache.block_table(s) for s in ("b", "c", "d")}
    assert sorted(tables["d"]) == [0, 1] and largest_free_run(cache.allocator.ref_counts) == 0
    mapping = cache.compact()
    # live blocks are laid out densely in sequence order: b, c, d -> every one of the six blocks moves
    expected = {old: new for new, old in enumerate(tables["b"] + tables["c"] + tables["d"])}
    assert mapping == expected and sum(old != new for old, new in mapping.items()) == 6
    assert [cache.block_table(s) for s in ("b", "c", "d")] == [[0, 1], [2, 3], [4, 5]]
    for old, new in mapping.items():     # the data moved with its block
        assert int(cache.k_pools[0][new].flatten()[0]) == old
    assert cache.validate() == []
    assert cache.compact() == {b: b for b in range(6)}  # already dense: nothing moves


def test_compaction_in_a_simulation_is_recorded_and_keeps_invariants():
    trace = synthetic(SyntheticSpec(requests=400, rate=40.0, prompt_median=64, output_median=64, max_total=512))
    result = simulate(trace, SimConfig(16, 256, samples=100, compact_cooldown=2, cross_check=True))
    assert result.compactions and result.validation == []
    first = result.compactions[0]
    assert first["scatter_after"] == 0.0 and first["scatter_before"] > 0.5
    assert first["pool_span_after"] == first["live_blocks"] <= first["pool_span_before"]
    assert 0 < first["moved_blocks"] <= first["live_blocks"]


def test_compaction_leaves_engine_logits_unchanged(tiny_model_dir):
    from reference_engine.engine import Engine

    def scattered_engine():
        engine = Engine.from_pretrained(tiny_model_dir, num_blocks=32, block_size=4)
        engine.prefill(["a", "b", "c"], [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19, 20]])
        engine.free("b")
        engine.prefill(["d"], [[21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]])  # reuses b's blocks out of order
        return engine

    reference, compacted = scattered_engine(), scattered_engine()
    mapping = compacted.cache.compact()
    assert any(old != new for old, new in mapping.items()) and compacted.cache.validate() == []
    for step_tokens in ([40, 41, 42], [43, 44, 45]):
        expected = reference.decode(["a", "c", "d"], step_tokens)
        got = compacted.decode(["a", "c", "d"], step_tokens)
        assert torch.equal(expected, got)


def test_hundred_thousand_requests_block_16():
    trace = synthetic(SyntheticSpec(requests=100_000, rate=200.0, prompt_median=64, output_median=32,
                                    max_total=1024))
    result = simulate(trace, SimConfig(16, 65536 // 16, tick_tokens=32, compaction=False))
    assert result.summary["completed"] == 100_000 and result.validation == []


def test_trace_round_trip_and_errors(tmp_path):
    trace = synthetic(SyntheticSpec(requests=50, seed=3))
    write_trace(trace, tmp_path / "t.jsonl")
    loaded = load_trace(tmp_path / "t.jsonl")
    assert [(r.prompt_tokens, r.output_tokens) for r in loaded] == [(r.prompt_tokens, r.output_tokens) for r in trace]
    for text, words in [("{", "line 1: not JSON"), ('{"arrival_s": 0, "prompt_tokens": 5}', "missing 'output_tokens'"),
                        ('{"arrival_s": 0, "prompt_tokens": -1, "output_tokens": 3}', "prompt_tokens must be"),
                        ("", "no requests")]:
        (tmp_path / "bad.jsonl").write_text(text)
        with pytest.raises(ModelDirError, match=words):
            load_trace(tmp_path / "bad.jsonl")


def test_model_sizing_and_sizes(tiny_model_dir):
    kv = ModelKv.from_dir(tiny_model_dir, "bfloat16")
    config = json.loads((tiny_model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    assert kv.bytes_per_token == 2 * config["num_hidden_layers"] * heads * head_dim * 2


def test_memory_budget_reads_as_in_every_command(tiny_model_dir):
    """--memory-budget 4G is 4 GiB here as in check/diff/generate/baseline (one parser: budget/plan.parse_size);
    without --with-model a token has no size, so the budget is refused in one line instead of ignored."""
    from llmdoctor.commands.probe import probe
    kv = ModelKv.from_dir(tiny_model_dir, "bfloat16")
    runner = CliRunner()
    args = ["kv", "--requests", "20", "--block-sizes", "16", "--with-model", str(tiny_model_dir), "--kv-dtype",
            "bfloat16", "--max-len", "64", "--format", "json"]
    pools = {}
    for budget in ("4M", "4MiB", "4MB"):  # 4G would cap the tiny model's pool at MAX_POOL_TOKENS either way
        result = runner.invoke(probe, [*args, "--memory-budget", budget])
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout)
        kv901 = next(f for f in report["findings"] if f["check"] == "KVC901")
        pools[budget] = kv901["evidence"]["pool_tokens"]
    assert pools["4M"] == pools["4MiB"] == 4 * 2**20 // kv.bytes_per_token
    assert pools["4MB"] == 4 * 10**6 // kv.bytes_per_token
    alone = runner.invoke(probe, ["kv", "--requests", "20", "--memory-budget", "4G"])
    assert alone.exit_code == 2 and "--with-model" in alone.output
    assert "Traceback" not in alone.output
    bad = runner.invoke(probe, [*args, "--memory-budget", "lots"])
    assert bad.exit_code == 2 and "invalid memory size" in bad.output


def test_cli_probe_kv_json_and_html(tmp_path, tiny_model_dir):
    from llmdoctor.commands.probe import probe
    runner = CliRunner()
    args = ["kv", "--requests", "300", "--rate", "50", "--block-sizes", "16,256", "--with-model", str(tiny_model_dir),
            "--memory-budget", "1MiB", "--max-len", "1024", "--format", "json"]
    result = runner.invoke(probe, args)
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    ids = {f["check"] for f in report["findings"]}
    assert ids == {"KVC901", "KVC902", "KVC903", "KVC904", "KVC905"}
    kv902 = next(f for f in report["findings"] if f["check"] == "KVC902")
    assert set(kv902["evidence"]["runs"]) == {"block 16", "block 256", "contiguous"}
    html = runner.invoke(probe, ["kv", "--requests", "200", "--block-sizes", "16", "--format", "html",
                                 "--output", str(tmp_path / "kv.html")])
    assert html.exit_code == 0, html.output
    assert "<svg" in (tmp_path / "kv.html").read_text()
    bad = runner.invoke(probe, ["kv", "--block-sizes", "0,16"])
    assert bad.exit_code == 2 and "block sizes must be" in bad.output


def test_a_huge_pool_simulates_like_the_reachable_one():
    trace = synthetic(SyntheticSpec(requests=200, rate=30.0, prompt_median=40, output_median=40, max_total=256))
    reachable = 2 * sum(-(-r.total_tokens // 16) for r in trace) + 1
    huge, exact = simulate(trace, SimConfig(16, 10**6)), simulate(trace, SimConfig(16, reachable))
    for key in ("used_blocks", "live_tokens", "scatter_mean", "pool_span", "running"):
        assert huge.timeline[key] == exact.timeline[key], key
    assert [c["moved_blocks"] for c in huge.compactions] == [c["moved_blocks"] for c in exact.compactions]
    assert huge.timeline["free_blocks"][0] == 10**6 - huge.timeline["used_blocks"][0]
    assert largest_free_run([1, 0, 0, 1, 0], free_tail=10) == 11 and largest_free_run([0, 0, 1], 1) == 2


def test_aligned_timelines_carry_values_forward():
    from probes.kv import aligned
    a = simulate([Request(0.0, 16, 0)], SimConfig(16, 4, tick_tokens=1, step_s=1.0, label="a"))
    b = simulate([Request(0.0, 16, 0), Request(3.0, 16, 0)], SimConfig(16, 4, tick_tokens=1, step_s=1.0, label="b"))
    xs, series = aligned([a, b], "used_blocks")
    assert xs == [0.0, 1.0, 3.0, 4.0]
    assert series == {"a": [1, 0, None, None], "b": [1, 0, 1, 0]}


def test_cli_replays_a_saved_trace(tmp_path):
    from llmdoctor.commands.probe import probe
    runner, trace = CliRunner(), tmp_path / "trace.jsonl"
    first = runner.invoke(probe, ["kv", "--requests", "150", "--block-sizes", "16", "--save-trace", str(trace),
                                  "--format", "json"])
    replay = runner.invoke(probe, ["kv", "--trace", str(trace), "--block-sizes", "16", "--format", "json"])
    assert first.exit_code == replay.exit_code == 0, (first.output, replay.output)
    runs = [json.loads(r.stdout)["findings"][1]["evidence"]["runs"]["block 16"] for r in (first, replay)]
    assert runs[0]["peak_reserved_tokens"] == runs[1]["peak_reserved_tokens"] and runs[0]["completed"] == 150
    assert json.loads(replay.stdout)["findings"][0]["evidence"]["workload"] == f"trace: {trace}"
    bad = runner.invoke(probe, ["kv", "--trace", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2


_requests = st.lists(st.tuples(st.floats(0, 20), st.integers(1, 200), st.integers(0, 200)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(_requests, st.sampled_from([1, 4, 16, 64]), st.integers(4, 64), st.integers(1, 8))
def test_any_trace_keeps_the_cache_consistent(rows, block_size, num_blocks, tick):
    trace = sorted((Request(a, p, o) for a, p, o in rows), key=lambda r: r.arrival_s)
    result = simulate(trace, SimConfig(block_size, num_blocks, tick_tokens=tick, step_s=0.5, compact_cooldown=1,
                                       compact_scatter_above=0.0, cross_check=True))
    s, line = result.summary, result.timeline
    too_big = sum(1 for r in trace if r.total_tokens > block_size * num_blocks)
    assert result.validation == []                     # engine invariants + probe == cache.stats() at every sample
    assert s["rejected_too_long"] == too_big and s["completed"] == len(trace) - too_big
    assert all(u <= num_blocks for u in line["used_blocks"])
    assert all(0 <= live <= reserved for live, reserved in zip(line["live_tokens"], line["reserved_tokens"]))
    assert line["used_blocks"][-1] == 0                # everything was freed at the end


def test_pool_smaller_than_one_max_length_reservation():
    trace = [Request(0.1 * i, 50, 20) for i in range(20)]
    result = run_kv_probe(trace, "small", pool_tokens=1000, max_len=2048, block_sizes=(16,))
    contiguous = result.run("contiguous").summary
    assert contiguous["completed"] == 0 and contiguous["rejected_too_long"] == 20
    assert result.run("block 16").summary["completed"] == 20
    assert "cannot hold one max-length sequence" in result.notes[0]
    findings = kv_findings(result)
    assert findings[1].evidence["saving_vs_contiguous"] == 1.0
    assert "not one 2048-token reservation fits" in findings[1].message


def test_blocks_per_request_histogram():
    from probes.kv_sim import histogram
    assert histogram([1, 1, 2, 5, 6, 10, 11, 400]) == {"1": 2, "2": 1, "3-5": 1, "6-10": 2, "11-20": 1, "21-50": 0,
                                                       "51-100": 0, ">100": 1}
