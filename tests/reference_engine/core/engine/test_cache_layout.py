"""The two kinds of layer cache: paged per-token pools shaped by each layer's layout, and a recurrent state per
sequence that is allocated, staged, committed, forked and freed with the sequence."""
import pytest
import torch

from reference_engine.core.cache.kv_cache import PagedKVCache
from reference_engine.core.cache.layout import KVLayout, StateLayout, bytes_per_token, state_bytes_per_sequence

LATENT = KVLayout(heads=1, k_dim=24, v_dim=0)             # MLA: latent + rope key, nothing for V
STATE = StateLayout((("conv", (8, 3)), ("ssm", (2, 4, 4))))
LAYOUT = [KVLayout(2, 8, 8), LATENT, STATE]


def test_bytes_follow_the_layout():
    assert bytes_per_token(LAYOUT, torch.float32) == (2 * 16 + 24) * 4
    assert state_bytes_per_sequence(LAYOUT, torch.bfloat16) == (24 + 32) * 4   # states stay float32
    cache = PagedKVCache(3, 4, 4, 2, 8, layout=LAYOUT)
    assert cache.flat_k(1).shape == (16, 1, 24) and cache.flat_v(1).shape == (16, 1, 0)
    assert cache.stats().bytes_per_token == (2 * 16 + 24) * 4


def test_state_lives_and_dies_with_its_sequence():
    cache = PagedKVCache(3, 4, 4, 2, 8, layout=LAYOUT)
    cache.allocate("a", 3)
    state = cache.states.get(2, "a")
    assert set(state) == {"conv", "ssm"} and not state["ssm"].any()
    cache.states.stage(2, "a", {"conv": state["conv"] + 1, "ssm": state["ssm"] + 2})
    assert cache.states.get(2, "a")["ssm"].eq(2).all()          # later calls of the step see the staged state
    cache.states.discard()
    assert not cache.states.get(2, "a")["ssm"].any()            # a failed step leaves it as it was
    cache.states.stage(2, "a", {"conv": state["conv"] + 1, "ssm": state["ssm"] + 2})
    cache.states.commit()
    cache.fork("a", "b")
    cache.states.stage(2, "b", {"conv": state["conv"], "ssm": state["ssm"] + 5})
    cache.states.commit()
    assert cache.states.get(2, "a")["ssm"].eq(2).all()          # a fork continues from its own copy
    with pytest.raises(ValueError, match="recurrent state"):
        cache.truncate("a", 1)
    cache.truncate("a", 0)
    assert not cache.states.get(2, "a")["ssm"].any()
    cache.free("a")
    cache.free("b")
    assert "a" not in cache.states and cache.validate() == []


def test_prefix_caching_is_refused_for_recurrent_layers():
    with pytest.raises(ValueError, match="prefix caching"):
        PagedKVCache(3, 4, 4, 2, 8, prefix_caching=True, layout=LAYOUT)
