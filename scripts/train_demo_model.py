"""Train the embedded demo model (llmdoctor/demo_model/): a tiny Llama on a public-domain novel.

Dev-only script (needs the test extras: transformers, tokenizers). It
1. fetches Botchan (Natsume Soseki, English translation, public domain) through tests/assets.py,
2. trains a byte-level BPE tokenizer with the project's own reference_engine.testing.train_bpe,
3. trains a 4-layer LlamaForCausalLM (transformers) on it for a few CPU minutes, single-threaded: chunks of the
   novel as plain text, and pairs of its sentences as ChatML exchanges (one sentence as the user's turn, the next
   as the assistant's, closed by <|im_end|>, the EOS id), so that the model ships a chat template it was trained
   on and learns to end its turn (GEN004 asks a chat question and expects the answer to end),
4. writes the directory with reference_engine.testing.factory.write_model_dir (same layout as the test models).

    python scripts/train_demo_model.py --minutes 28 --steps 700 --out llmdoctor/demo_model

(the shipped model: 700 steps in 16 minutes on a loaded 2-core machine; the time budget only stops a slow run)
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reference_engine.testing import factory  # noqa: E402
from reference_engine.testing.train_bpe import LLAMA3_PATTERN, train_bpe  # noqa: E402
from tests.assets import botchan_text  # noqa: E402

ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True, rope_theta=10000.0)
VOCAB = 1024
SEQ_LEN, BATCH = 128, 16
LINES_PER_DOCUMENT = 12  # the novel is hard-wrapped without blank lines; chunks of lines act as documents
EXCHANGES_PER_DOCUMENT = 2  # about a sixth of the training tokens are chat turns (22k of 138k)
MAX_SENTENCE = 160       # characters: longer sentences make no chat turn (an answer should end within 32 tokens)
PROMPTS = ["The", "I was", "When I went to the school", "He said that"]
CHAT_QUESTION = "What is the capital of France?"   # checks/shared/prompts.py CHAT_PROBE

README = """\
# llmdoctor demo model

A tiny, healthy Llama-architecture model embedded in llmdoctor so that `llmdoctor check --demo` works offline.

- Architecture: LlamaForCausalLM, {layers} layers, hidden {hidden}, {heads} heads / {kv} KV heads (GQA),
  intermediate {inter}, tied embeddings, vocab {vocab}, float32, {params:,} parameters.
- Tokenizer: byte-level BPE ({vocab} tokens incl. special tokens {specials}) trained by
  `reference_engine.testing.train_bpe` on the training text; ChatML chat template in tokenizer_config.json.
- Training text: *Botchan* by Natsume Soseki, English translation by Yasotaro Morri (1919), from Project
  Gutenberg; public domain. Copied from `test/botchan.txt` of the `sentencepiece==0.2.3` sdist on PyPI.
  The Project Gutenberg header and licence footer were removed before training.
- Training: `python scripts/train_demo_model.py {command}` — {steps} AdamW steps of {batch}x{seq} tokens, single CPU
  thread, {minutes:.1f} wall-clock minutes; final training loss {loss:.2f} (perplexity {ppl:.1f}). Seed {seed}.
  The stream interleaves chunks of {lines} lines of the novel (each after BOS) with ChatML exchanges of two
  consecutive sentences (the user's, then the assistant's, closed by <|im_end|>, the EOS id): the model was
  trained on the chat template it ships and ends its turn (about a sixth of the training tokens). It also ends
  some plain continuations after a sentence, and now and then starts a chat turn of its own.
- Greedy samples (it continues text in the style of the novel; it is no assistant, its chat answers are
  sentences of the novel, but they end):
{samples}
  - chat "{chat_prompt}": {chat_answer}

The weights, tokenizer and this README are released under Apache-2.0, like llmdoctor.
"""


def novel_text() -> str:
    """The novel without Project Gutenberg's header and licence footer."""
    text = botchan_text().lstrip("\ufeff")
    start = re.search(r"\*\*\* ?START OF TH(E|IS) PROJECT GUTENBERG.*\n", text)
    end = re.search(r"\*\*\* ?END OF TH(E|IS) PROJECT GUTENBERG", text)
    body = text[start.end() if start else 0:end.start() if end else len(text)]
    return re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"


def token_stream(text: str, tokenizer: dict) -> torch.Tensor:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(tokenizer))
    lines = text.splitlines(keepends=True)
    exchanges = iter(chat_exchanges(text))
    ids: list[int] = []
    for i in range(0, len(lines), LINES_PER_DOCUMENT):
        # each chunk starts with BOS (the tokenizer's post-processor), as prompts at inference do
        ids += tok.encode("".join(lines[i:i + LINES_PER_DOCUMENT])).ids
        # then exchanges, encoded as chat prompts are (the rendered template, no BOS added)
        for exchange in [e for e in (next(exchanges, None) for _ in range(EXCHANGES_PER_DOCUMENT)) if e]:
            ids += tok.encode(exchange, add_special_tokens=False).ids
    return torch.tensor(ids, dtype=torch.long)


def chat_exchanges(text: str) -> list[str]:
    """Consecutive sentences of the novel as ChatML exchanges, as the demo's chat template renders them: the
    user says one sentence, the assistant answers with the next and ends its turn with <|im_end|>."""
    sentences = [" ".join(s.split()) for s in re.split(r"(?<=[.?!])\s+", text)]
    sentences = [s for s in sentences if 0 < len(s) <= MAX_SENTENCE]
    return [f"{factory.IM_START}user\n{q}{factory.IM_END}\n{factory.IM_START}assistant\n{a}{factory.IM_END}\n"
            for q, a in zip(sentences[::2], sentences[1::2])]


def train(model, data: torch.Tensor, minutes: float, max_steps: int, seed: int) -> tuple[int, float]:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
    start, budget_s, step, ema = time.monotonic(), 60 * minutes, 0, None
    model.train()
    while (progress := max(step / max_steps, (time.monotonic() - start) / budget_s)) < 1.0:
        # warm-up, then cosine decay to 10% over whichever budget (steps or time) runs out first
        lr_scale = min(1.0, (step + 1) / 50) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = 3e-3 * lr_scale
        starts = torch.randint(0, len(data) - SEQ_LEN - 1, (BATCH,), generator=gen)
        batch = torch.stack([data[s:s + SEQ_LEN + 1] for s in starts.tolist()])  # [B, T+1]
        loss = _next_token_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        step += 1
        if step % 50 == 0:
            print(f"step {step:5d}  loss {ema:.3f}  lr {3e-3 * lr_scale:.2e}", flush=True)
    return step, ema


def _next_token_loss(model, batch: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=batch[:, :-1]).logits  # [B, T, V]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def chat_sample(model, tokenizer: dict, question: str) -> str:
    """The greedy answer to one user turn, as the template renders it (no BOS added), up to <|im_end|>."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(tokenizer))
    prompt = f"{factory.IM_START}user\n{question}{factory.IM_END}\n{factory.IM_START}assistant\n"
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False).ids])
    with torch.no_grad():
        gen = model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0,
                             eos_token_id=tok.token_to_id(factory.IM_END))
    return json.dumps(tok.decode(gen[0, ids.shape[1]:].tolist(), skip_special_tokens=False))


def samples(model, tokenizer: dict) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(json.dumps(tokenizer))
    model.eval()
    out = []
    for prompt in PROMPTS:
        ids = torch.tensor([tok.encode(prompt).ids])
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0)
        out.append(tok.decode(gen[0].tolist(), skip_special_tokens=True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "llmdoctor" / "demo_model"))
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)  # the machine is shared; also makes the run reproducible
    torch.manual_seed(args.seed)
    from transformers import LlamaConfig, LlamaForCausalLM

    text = novel_text()
    tokenizer = train_bpe([text], VOCAB, factory.SPECIAL_TOKENS, pattern=LLAMA3_PATTERN, bos_token=factory.BOS)
    config = factory.model_config("llama", tokenizer, dict(ARCH, initializer_range=0.02))
    data = token_stream(text, tokenizer)
    print(f"{len(text)} characters -> {len(data)} tokens; vocab {config['vocab_size']}", flush=True)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in config.items() if k != "torch_dtype"}))
    t0 = time.monotonic()
    steps, loss = train(model, data, args.minutes, args.steps, args.seed)
    minutes = (time.monotonic() - t0) / 60
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    out = factory.write_model_dir(args.out, config, tokenizer, weights)
    texts = samples(model, tokenizer)
    params = sum(v.numel() for v in weights.values())
    (out / "README.md").write_text(README.format(
        layers=ARCH["num_hidden_layers"], hidden=ARCH["hidden_size"], heads=ARCH["num_attention_heads"],
        kv=ARCH["num_key_value_heads"], inter=ARCH["intermediate_size"], vocab=config["vocab_size"], params=params,
        specials=", ".join(f"`{t}`" for t in factory.SPECIAL_TOKENS), steps=steps, batch=BATCH, seq=SEQ_LEN,
        minutes=minutes, loss=loss, ppl=math.exp(loss), seed=args.seed,
        samples="\n".join(f"  - {json.dumps(t)}" for t in texts), lines=LINES_PER_DOCUMENT,
        command=f"--minutes {args.minutes:g} --steps {args.steps}",
        chat_prompt=CHAT_QUESTION, chat_answer=chat_sample(model, tokenizer, CHAT_QUESTION)))
    print("\n".join(texts))
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
