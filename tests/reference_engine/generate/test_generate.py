"""The generate loop against transformers: greedy token for token, beam search sequence for sequence;
plus prompt forms, stopping rules, seeded sampling, streaming and the closed-loop validate()."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from reference_engine.generate import loop as gen
from reference_engine.generate.sampling_params import SamplingParams
from tests.reference_engine.generate.generate_models import engine, hf_generate, model_dir

PROMPTS = ["The old lighthouse stood", "Question: What is the capital of France? Answer:", "A small library"]


@pytest.fixture(scope="module")
def llama():
    return engine("llama")


# ---------------------------------------------------------------------------------------------- vs transformers

@pytest.mark.parametrize("preset", ["llama", "qwen3"])
def test_greedy_equals_transformers_64_tokens(preset):
    eng = engine(preset)
    outputs = eng.generate(PROMPTS[:2], max_new_tokens=64)  # batched: both run in the same steps
    for prompt, out in zip(PROMPTS, outputs):
        expected = hf_generate(model_dir(preset), eng.tokenizer.encode(prompt), max_new_tokens=64)
        assert out.token_ids == expected
        assert out.finish_reason == ("eos" if len(expected) < 64 else "length")
    assert eng.cache.allocator.num_used == 0


@pytest.mark.assets
def test_smollm2_chat_answer_and_greedy_match(smollm2_dir):
    from reference_engine.engine import Engine
    eng = Engine.from_pretrained(smollm2_dir)
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    out = eng.generate([chat], max_new_tokens=64)[0]
    assert out.text == "The capital of France is Paris." and out.finish_reason == "eos"
    prompt = eng.tokenizer.encode("The three primary colours are", add_special_tokens=True)
    ours = eng.generate(prompt, max_new_tokens=64, ignore_eos=True)[0].token_ids
    assert ours == hf_generate(smollm2_dir, prompt, max_new_tokens=64, min_new_tokens=64)
    assert hf_generate(smollm2_dir, out.prompt_token_ids, max_new_tokens=64) == out.token_ids


# ---------------------------------------------------------------------------------------------- prompts

def test_prompt_forms_agree(llama):
    text = PROMPTS[1]
    ids = llama.tokenizer.encode(text)
    chat = [{"role": "user", "content": "hi"}]
    chat_ids = llama.tokenizer.encode(llama.tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                                                          tokenize=False), add_special_tokens=False)
    a, b, c, d = llama.generate([text, ids, chat, chat_ids], max_new_tokens=8)
    assert a.token_ids == b.token_ids and a.prompt_token_ids == ids
    assert c.token_ids == d.token_ids and c.prompt_token_ids == chat_ids
    assert llama.generate(text, max_new_tokens=8)[0].token_ids == a.token_ids  # a single prompt, unwrapped


@pytest.mark.parametrize("bad, match", [([], "non-empty"), ([[]], "empty"), ([10**9], "out of vocabulary"),
                                        ([[1.5]], "prompt must be"), (None, "non-empty")])
def test_bad_prompts_are_clear_errors(llama, bad, match):
    with pytest.raises(ValueError, match=match):
        llama.generate(bad)


def test_prompt_longer_than_context(llama):
    with pytest.raises(ValueError, match="context"):
        llama.generate([[5] * llama.config.max_position_embeddings])
    with pytest.raises(TypeError, match="unknown"):
        llama.generate("x", temprature=1.0)


# ---------------------------------------------------------------------------------------------- stopping

def test_max_new_tokens_always_enforced(llama):
    for n in (1, 3, 17):
        out = llama.generate(PROMPTS[0], max_new_tokens=n, ignore_eos=True, temperature=1.5, seed=n)[0]
        assert len(out.token_ids) == n and out.finish_reason == "length"


def test_every_eos_id_stops_and_is_left_out_of_text(llama, tmp_path):
    free = llama.generate(PROMPTS[0], max_new_tokens=12, ignore_eos=True)[0]
    target = free.token_ids[6]
    cut = free.token_ids.index(target)
    # a model dir whose generation_config lists two EOS ids: the second one is what the model says
    import json
    import shutil
    path = shutil.copytree(model_dir("llama"), tmp_path / "m")
    gen_cfg = json.loads((path / "generation_config.json").read_text())
    gen_cfg["eos_token_id"] = [gen_cfg["eos_token_id"], target]
    (path / "generation_config.json").write_text(json.dumps(gen_cfg))
    from reference_engine.engine import Engine
    out = Engine.from_pretrained(path).generate(PROMPTS[0], max_new_tokens=12)[0]
    assert out.token_ids == free.token_ids[:cut + 1] and out.finish_reason == "eos"
    assert out.text == llama.tokenizer.decode(free.token_ids[:cut], skip_special_tokens=True)


def test_stop_token_ids_and_stop_strings(llama):
    free = llama.generate(PROMPTS[1], max_new_tokens=20, ignore_eos=True)[0]
    out = llama.generate(PROMPTS[1], max_new_tokens=20, stop_token_ids=[free.token_ids[4]])[0]
    assert out.finish_reason == "stop" and out.stop_reason == free.token_ids[4]
    assert out.token_ids == free.token_ids[:free.token_ids.index(free.token_ids[4]) + 1]
    stop = free.text[len(free.text) // 2:len(free.text) // 2 + 3]
    out = llama.generate(PROMPTS[1], max_new_tokens=20, stop=[stop], ignore_eos=True)[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.text == free.text[:free.text.find(stop)]
    assert free.token_ids[:len(out.token_ids)] == out.token_ids


def test_context_limit_stops(llama):
    limit = llama.config.max_position_embeddings
    out = llama.generate([[7] * (limit - 5)], max_new_tokens=50, ignore_eos=True)[0]
    assert out.finish_reason == "context_length" and len(out.token_ids) == 5


def test_request_larger_than_the_pool_ends_cleanly():
    eng = engine("llama", num_blocks=3, block_size=4)  # 12 slots in all
    short, long = eng.generate([[5, 6, 7], [5] * 20], max_new_tokens=30, ignore_eos=True)
    # 12 slots hold the 3 prompt ids and 9 generated ones; the 10th was sampled but has no slot to go to
    assert short.finish_reason == "kv_cache_full" and len(short.token_ids) == 10
    assert long.finish_reason == "kv_cache_full" and long.token_ids == []
    assert eng.cache.allocator.num_used == 0


# ---------------------------------------------------------------------------------------------- sampling

def test_top_k_one_equals_greedy(llama):
    greedy = llama.generate(PROMPTS, max_new_tokens=16, ignore_eos=True)
    sampled = llama.generate(PROMPTS, max_new_tokens=16, ignore_eos=True, temperature=1.7, top_k=1, seed=5)
    assert [o.token_ids for o in greedy] == [o.token_ids for o in sampled]


def test_seeded_request_is_reproducible_whatever_the_batch(llama):
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=123, max_new_tokens=16, ignore_eos=True)
    alone = llama.generate(PROMPTS[0], params)[0]
    others = [SamplingParams(temperature=0.9, max_new_tokens=n, ignore_eos=True) for n in (5, 30)]
    batched = llama.generate([PROMPTS[1], PROMPTS[0], PROMPTS[2]], [others[0], params, others[1]])[1]
    assert alone.token_ids == batched.token_ids
    assert llama.generate(PROMPTS[0], params)[0].token_ids == alone.token_ids


def test_logprobs_are_those_of_the_chosen_tokens(llama):
    out = llama.generate(PROMPTS[0], max_new_tokens=6, logprobs=True, ignore_eos=True)[0]
    full = llama.logits(out.prompt_token_ids + out.token_ids)
    n = len(out.prompt_token_ids)
    expected = torch.log_softmax(full[n - 1:-1], -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_eos_patience_ends_a_sampled_request(llama):
    eos = llama.config.eos_token_ids[0]
    # threshold 1e-9: P(EOS) is always "high", so patience 3 ends the request after three steps, with EOS
    out = llama.generate(PROMPTS[0], temperature=1.0, seed=0, eos_patience=3, eos_patience_threshold=1e-9,
                         max_new_tokens=20)[0]
    assert out.finish_reason == "eos_patience" and len(out.token_ids) == 3 and out.token_ids[-1] == eos


def test_repetition_penalty_matches_transformers(llama):
    prompt = llama.tokenizer.encode(PROMPTS[2])
    out = llama.generate(prompt, max_new_tokens=24, repetition_penalty=1.3, ignore_eos=True)[0]
    assert out.token_ids == hf_generate(model_dir("llama"), prompt, max_new_tokens=24, min_new_tokens=24,
                                        repetition_penalty=1.3)


# ---------------------------------------------------------------------------------------------- streaming

def test_stream_concatenates_to_the_output_text(llama):
    for params in (SamplingParams(max_new_tokens=40, ignore_eos=True),
                   SamplingParams(max_new_tokens=40, temperature=1.2, seed=9, ignore_eos=True),
                   SamplingParams(max_new_tokens=40, num_beams=2)):
        finished = []
        deltas = list(llama.stream(PROMPTS[0], params, on_finish=finished.append))
        assert "".join(deltas) == finished[0].text == llama.generate(PROMPTS[0], params)[0].text
        assert all(d and "\ufffd" not in d for d in deltas if "\ufffd" not in finished[0].text)
    assert llama.cache.allocator.num_used == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20), st.integers(0, 99))
def test_stream_random_unicode_prompts(llama, prompt, seed):
    """A random model emits byte tokens that split and break characters: the stream still adds up."""
    finished = []
    deltas = list(llama.stream(prompt, max_new_tokens=12, temperature=1.5, seed=seed, on_finish=finished.append))
    out = finished[0]
    assert "".join(deltas) == out.text
    assert out.text == llama.tokenizer.decode(out.token_ids[:-1] if out.finish_reason == "eos" else out.token_ids,
                                              skip_special_tokens=True)
    assert all("\ufffd" not in d for d in deltas if "\ufffd" not in out.text)


def test_abandoned_stream_frees_its_blocks(llama):
    it = llama.stream(PROMPTS[0], max_new_tokens=50, ignore_eos=True)
    next(it)
    it.close()
    assert llama.cache.allocator.num_used == 0


# ---------------------------------------------------------------------------------------------- validate

def test_validate_healthy(llama):
    assert gen.validate(llama) == []
    assert gen.validate(llama, [1, 2, 3]) == []


def test_validate_finds_nan_logits(llama, monkeypatch):
    real = llama.logits
    monkeypatch.setattr(llama, "logits", lambda ids, **kw: real(ids, **kw) * float("nan"))
    assert any("NaN" in p for p in gen.validate(llama))


def test_validate_finds_argmax_on_a_padding_row(monkeypatch):
    padded = engine("llama", vocab_size=640)  # embedding rows past the tokenizer, as Qwen checkpoints have
    assert len(padded.tokenizer) < 640
    real = padded.logits
    monkeypatch.setattr(padded, "logits", lambda ids, **kw: torch.cat([real(ids, **kw)[:, :-1],
                                                                       torch.full((len(ids), 1), 1e4)], -1))
    assert any("no token in the tokenizer" in p for p in gen.validate(padded))


def test_validate_never_raises(llama, monkeypatch):
    monkeypatch.setattr(llama, "logits", lambda ids, **kw: 1 / 0)
    assert any("ZeroDivisionError" in p for p in gen.validate(llama))
