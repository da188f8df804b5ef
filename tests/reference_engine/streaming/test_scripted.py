"""Scripted steps (streaming/scripted.py): step by step on the resident engine, one pass on the streaming core,
and both equal to driving prefill/decode by hand."""
from __future__ import annotations

import pytest
import torch

from reference_engine.core.cache.kv_cache import CacheFullError
from reference_engine.core.engine import CoreEngine
from reference_engine.streaming.scripted import Script, chunked_then_decoded, run_scripts
from reference_engine.streaming.streaming_core import StreamingCore
from reference_engine.testing.factory import build_model_dir

IDS = list(range(3, 50))          # 47 tokens: crosses blocks of 16


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request, tmp_path_factory):
    return build_model_dir(tmp_path_factory.mktemp(request.param) / "m", request.param, seed=5)


def by_hand(core, ids, prefill, chunk) -> list[torch.Tensor]:
    out = []
    with core.scratch() as (seq,):
        for start in range(0, prefill, chunk):
            out.append(core.prefill([seq], [ids[start:min(start + chunk, prefill)]]))
        for t in ids[prefill:]:
            out.append(core.decode([seq], [t]))
    return out


def test_chunked_then_decoded_layout():
    script = chunked_then_decoded(IDS, 40, 13)
    assert script.steps[:4] == [[IDS[0:13]], [IDS[13:26]], [IDS[26:39]], [IDS[39:40]]]
    assert script.steps[4:] == [[[t]] for t in IDS[40:]] and script.width == 1


def test_resident_runs_prefill_and_decode_as_the_generate_loop_does(model):
    core = CoreEngine.from_pretrained(model, num_blocks=64)
    (got,) = run_scripts(core, [chunked_then_decoded(IDS, 39, 13)])
    want = by_hand(core, IDS, 39, 13)
    assert all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == len(want) == 3 + 8
    assert core.cache.allocator.num_free == 64          # scratch sequences freed


def test_streaming_runs_every_script_in_one_pass(model):
    resident = CoreEngine.from_pretrained(model, num_blocks=64)
    streaming = StreamingCore.from_pretrained(model, num_blocks=64)
    rows = [IDS[:9], IDS[4:30], IDS[20:23]]
    scripts = [chunked_then_decoded(IDS, 40, 13),                     # shared cache across chunks and decodes
               Script([[IDS]], all_logits=True),                       # full recompute, every position
               Script([rows, [[r[0]] for r in rows]])]                 # a padded batch, then a batched decode
    want = run_scripts(resident, scripts)
    got = run_scripts(streaming, scripts)
    assert streaming.passes == 1 and streaming.cache.allocator.num_free == 64
    for a, b in zip(got, want):
        assert [x.shape for x in a] == [x.shape for x in b]
        assert max(float((x - y).abs().max()) for x, y in zip(a, b)) < 1e-4
    # the incremental path reproduces the full recompute (what ENG001 checks), also inside one pass
    inc = torch.cat(got[0][3:])
    assert float((inc - got[1][0][39:]).abs().max()) < 1e-4


def test_streaming_checks_cache_room_before_allocating(model):
    streaming = StreamingCore.from_pretrained(model, num_blocks=3)       # 48 slots
    with pytest.raises(CacheFullError):
        run_scripts(streaming, [Script([[IDS]]), Script([[IDS]])])
    assert streaming.cache.allocator.num_free == 3 and streaming.passes == 0


def test_empty_step_is_an_error(model):
    with pytest.raises(ValueError, match="no tokens"):
        run_scripts(CoreEngine.from_pretrained(model, num_blocks=8), [Script([[[]]])])
