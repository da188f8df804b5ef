"""SamplingParams validation: every bad value is a ValueError naming the field."""
import pytest

from reference_engine.config import GenerationConfig
from reference_engine.generate.sampling_params import SamplingParams


def test_defaults_are_greedy_and_valid():
    p = SamplingParams()
    assert p.greedy and p.max_new_tokens >= 1 and p.stop == [] and p.num_beams == 1


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 1e-9}, "temperature"),
    ({"top_k": -2}, "top_k"),
    ({"top_k": 1.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"min_p": -0.1}, "min_p"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": True}, "max_new_tokens"),
    ({"stop": [""]}, "stop"),
    ({"stop": [3]}, "stop"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ({"seed": "x"}, "seed"),
    ({"num_beams": 0}, "num_beams"),
    ({"num_beams": 2, "temperature": 0.7}, "num_beams"),
    ({"length_penalty": float("inf")}, "length_penalty"),
    ({"early_stopping": "sometimes"}, "early_stopping"),
    ({"dynamic_temperature": (0.9, 0.5)}, "dynamic_temperature"),
    ({"eos_patience": -1}, "eos_patience"),
    ({"eos_patience_threshold": 0.0}, "eos_patience_threshold"),
])
def test_bad_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_normalisations():
    p = SamplingParams(stop="###", stop_token_ids=7, top_k=-1, dynamic_temperature=[0.5, 1])
    assert p.stop == ["###"] and p.stop_token_ids == [7] and p.top_k == 0
    assert p.dynamic_temperature == (0.5, 1.0)


def test_from_generation_config():
    gen = GenerationConfig(do_sample=True, temperature=0.6, top_p=0.9, top_k=20, max_new_tokens=12)
    p = SamplingParams.from_generation_config(gen, seed=3)
    assert (p.temperature, p.top_p, p.top_k, p.max_new_tokens, p.seed) == (0.6, 0.9, 20, 12, 3)
    assert SamplingParams.from_generation_config(GenerationConfig(do_sample=False, temperature=0.6)).greedy
    with pytest.raises(ValueError, match="unknown"):
        SamplingParams.from_generation_config(None, nonsense=1)
