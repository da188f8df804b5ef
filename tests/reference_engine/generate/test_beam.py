"""Beam search against transformers (num_beams 2 and 4, length penalty, early stopping) and KV sharing."""
import pytest

from reference_engine.generate.sampling_params import SamplingParams
from tests.reference_engine.generate.generate_models import engine, hf_generate, model_dir

PROMPT = "The old lighthouse stood"


@pytest.fixture(scope="module")
def llama():
    return engine("llama")


@pytest.mark.parametrize("num_beams", [2, 4])
@pytest.mark.parametrize("length_penalty, early_stopping", [(1.0, False), (0.5, True), (2.0, "never"),
                                                            (2.0, False), (0.5, "never")])
def test_beam_search_equals_transformers(llama, num_beams, length_penalty, early_stopping):
    # extra stop ids that this model produces often, so hypotheses finish early and the scoring rules matter
    prompt = llama.tokenizer.encode(PROMPT)
    greedy = llama.generate(prompt, max_new_tokens=24, ignore_eos=True)[0].token_ids
    extra = [greedy[5], greedy[11]]
    eos = llama.config.eos_token_ids
    for stop_ids in ([], extra):
        params = SamplingParams(num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping,
                                max_new_tokens=20, stop_token_ids=stop_ids)
        out = llama.generate(prompt, params)[0]
        expected = hf_generate(model_dir("llama"), prompt, max_new_tokens=20, num_beams=num_beams,
                               length_penalty=length_penalty, early_stopping=early_stopping,
                               eos_token_id=eos + stop_ids, pad_token_id=0)
        assert out.token_ids == expected
    assert llama.cache.allocator.num_used == 0 and llama.cache.validate() == []



def test_beams_share_kv_blocks(llama, monkeypatch):
    """4 beams over a 64-token prompt: the prompt's blocks are shared, never copied per beam."""
    prompt = (llama.tokenizer.encode(" ".join(["the keeper walked to the village"] * 12)))[:64]
    prompt_blocks = llama.cache.blocks_for(len(prompt))
    seen = []
    real_decode = llama.decode

    def spy(seq_ids, token_ids, **kw):
        stats = llama.cache.stats()
        seen.append((stats.used_blocks, stats.shared_blocks))
        return real_decode(seq_ids, token_ids, **kw)

    monkeypatch.setattr(llama, "decode", spy)
    out = llama.generate(prompt, SamplingParams(num_beams=4, max_new_tokens=12, ignore_eos=True))[0]
    assert len(out.token_ids) == 12 and seen
    # the prompt's blocks once, plus one private partial block per beam; private copies would need 4x the prompt
    assert max(used for used, _ in seen) <= prompt_blocks + 4
    assert all(shared >= prompt_blocks - 1 for _, shared in seen)
    assert llama.cache.allocator.num_used == 0
