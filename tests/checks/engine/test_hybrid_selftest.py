"""The hybrid self-tests (ENG010-ENG013): quiet on healthy LFM2, Granite 4 and Falcon-H1 models, each firing on an
engine sabotaged the way real hybrid bugs break one (a conv window not carried, a chunk that ignores the state it
starts from, a packed batch run as one sequence, a state slot reused without zeroing, an inverted decay), and
skipped on an attention-only model. Three tiny hybrids built by transformers; this file and
test_hybrid_check_runs.py took 17 s together on the 2-core machine (up to ~40 s under load)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from checks.catalogue.inputs import CheckInputs
from checks.engine import hybrid
from checks.catalogue.registry import REGISTRY, Skip
from reference_engine.core import model
from reference_engine.core.recurrent import mamba2, short_conv
from reference_engine.core.cache.state_cache import StateCache
from tests.reference_engine.core.tiny_models import checkable

SMALL = {"lfm2_conv3_attn1": dict(num_hidden_layers=2, layer_types=["conv", "full_attention"]),
         "granite4_moe_rope": dict(num_hidden_layers=2, layer_types=["mamba", "attention"], num_local_experts=2,
                                   num_experts_per_tok=1),
         "falcon_h1_gate_biases_tied": {}}
CHECKS = (hybrid.recurrent_chunks_vs_one_prefill, hybrid.recurrent_batch_vs_alone,
          hybrid.recurrent_state_starts_from_zero, hybrid.recurrent_state_stays_finite)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {v: checkable(tmp_path_factory.mktemp(v), v, **kw) for v, kw in SMALL.items()}


def ctx_of(dirs, variant) -> CheckInputs:
    return CheckInputs(dirs[variant], quick=True)


def test_catalogue_entries():
    for i in ("ENG010", "ENG011", "ENG012", "ENG013"):
        spec = REGISTRY[i]
        assert spec.category == "selftest" and spec.severity.value == "error"
        assert spec.summary.startswith("Reference engine self-test:")


@pytest.mark.parametrize("variant", list(SMALL))
def test_healthy_hybrids_pass(dirs, variant):
    ctx = ctx_of(dirs, variant)
    for run in CHECKS:
        assert list(run(ctx)) == [], run.__name__


def test_attention_only_model_skips(factory_model_dir):
    ctx = CheckInputs(factory_model_dir("llama"), quick=True)
    with pytest.raises(Skip, match="no recurrent layers"):
        list(hybrid.recurrent_chunks_vs_one_prefill(ctx))


def test_eng010_fires_when_the_conv_window_is_not_carried(dirs, monkeypatch):
    real = short_conv.causal_conv
    monkeypatch.setattr(short_conv, "causal_conv", lambda x, w, b, window: real(x, w, b, torch.zeros_like(window)))
    (problem,) = hybrid.recurrent_chunks_vs_one_prefill(ctx_of(dirs, "lfm2_conv3_attn1"))
    assert "short_conv layers: a prefill in chunks of 1 disagrees" in problem.message


def test_eng010_fires_when_a_chunk_ignores_the_state_it_starts_from(dirs, monkeypatch):
    real = mamba2.ssd_chunked
    monkeypatch.setattr(mamba2, "ssd_chunked", lambda x, dt, A, B, C, state, chunk:
                        real(x, dt, A, B, C, torch.zeros_like(state), chunk))
    (problem,) = hybrid.recurrent_chunks_vs_one_prefill(ctx_of(dirs, "granite4_moe_rope"))
    assert "mamba2 layers: a prefill in chunks of 3 disagrees" in problem.message


def test_eng010_fires_when_a_parallel_layer_forgets_its_mamba_conv_window(dirs, monkeypatch):
    real = mamba2.causal_conv
    monkeypatch.setattr(mamba2, "causal_conv", lambda x, w, b, window: real(x, w, b, torch.zeros_like(window)))
    (problem,) = hybrid.recurrent_chunks_vs_one_prefill(ctx_of(dirs, "falcon_h1_gate_biases_tied"))
    assert "attention_mamba2 layers: a prefill in chunks of 1 disagrees" in problem.message


def test_eng011_fires_when_the_packed_batch_runs_as_one_sequence(dirs, monkeypatch):
    def leaky(x, w, config, step):
        meta = step.meta
        one = dataclasses.replace(meta, seq_ids=meta.seq_ids[:1], starts=meta.starts[:1], counts=(x.shape[0],))
        return short_conv.short_conv_block(x, w, config, dataclasses.replace(step, meta=one))
    monkeypatch.setitem(model.MIXERS, "short_conv", leaky)
    (problem,) = hybrid.recurrent_batch_vs_alone(ctx_of(dirs, "lfm2_conv3_attn1"))
    assert "a batch of unequal lengths differs" in problem.message


@pytest.mark.parametrize("variant", list(SMALL))
def test_eng012_fires_when_a_state_is_handed_out_again_unzeroed(dirs, monkeypatch, variant):
    parked, free, allocate = [], StateCache.free, StateCache.allocate

    def park(self, seq_id):
        if seq_id in self.states:
            parked.append(self.states[seq_id])
        free(self, seq_id)

    def reuse(self, seq_id):
        if parked:
            self.states[seq_id] = parked.pop()
        else:
            allocate(self, seq_id)
    monkeypatch.setattr(StateCache, "free", park)
    monkeypatch.setattr(StateCache, "allocate", reuse)
    monkeypatch.setattr(StateCache, "reset", lambda self, seq_id: None)     # truncate to 0 keeps the state
    found = list(hybrid.recurrent_state_starts_from_zero(ctx_of(dirs, variant)))
    assert [p.evidence["case"] for p in found] == ["a freed sequence's id reused", "a sequence truncated to 0"]


def test_eng013_fires_on_an_inverted_decay(dirs, monkeypatch):
    real = mamba2.ssd_recurrent
    monkeypatch.setattr(mamba2, "ssd_recurrent", lambda x, dt, A, B, C, state: real(x, dt, -20 * A, B, C, state))
    (problem,) = hybrid.recurrent_state_stays_finite(ctx_of(dirs, "granite4_moe_rope"))
    assert "is not finite" in problem.message or "logits are not finite" in problem.message
