"""Engine: the three stages composed — tokenizer -> transformer core -> generate.

    engine = Engine.from_pretrained("model/")        # core now, tokenizer on first use
    engine.logits(engine.tokenizer.encode("Hello"))  # [seq, vocab] float32
    engine.generate(["Once upon a time"], SamplingParams(max_new_tokens=32))

The stages know nothing of each other: the core (reference_engine.core) runs token ids over the paged cache,
the generate stage drives any object with a `tokenizer` and the core's step methods. This facade is the one
place that puts them together.
"""
from __future__ import annotations

from pathlib import Path

from reference_engine.core.engine import CoreEngine
from reference_engine.errors import ModelDirError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")  # what a Hugging Face directory may carry its vocabulary in


class Engine:
    def __init__(self, core: CoreEngine, tokenizer=None, adapter_dir: Path | None = None):
        self.core = core
        self._tokenizer = tokenizer
        self.adapter_dir = adapter_dir   # a LoRA adapter merged into the weights; its tokenizer, when it has one

    @classmethod
    def from_pretrained(cls, model_dir, device="cpu", dtype="float32", num_blocks: int | None = None,
                        block_size: int = 16, prefix_caching: bool = False, streaming: bool = False,
                        adapter=None) -> "Engine":
        """streaming=True: one decoder layer in memory at a time (streaming/streaming_core.py; budget/plan.py decides).
        adapter: a PEFT LoRA adapter directory merged into the weights at load (reference_engine/adapter/)."""
        kw = dict(device=device, dtype=dtype, num_blocks=num_blocks, block_size=block_size,
                  prefix_caching=prefix_caching, adapter=adapter)
        if streaming:
            from reference_engine.streaming.streaming_core import StreamingCore
            return cls(StreamingCore.from_pretrained(model_dir, **kw), adapter_dir=_path(adapter))
        return cls(CoreEngine.from_pretrained(model_dir, **kw), adapter_dir=_path(adapter))

    # ---- stage 1: the tokenizer, loaded on first use -------------------------------------------------
    @property
    def has_tokenizer(self) -> bool:
        """False when the model ships no tokenizer at all: generate/stream then answer token-id prompts with ids
        and empty text, as vLLM does with skip_tokenizer_init. A tokenizer file that is there but broken is True
        here, so its error surfaces on first use instead of being taken for an absent tokenizer."""
        if self._tokenizer is not None:
            return True
        model_dir: Path | None = self.core.model_dir
        if model_dir is None:
            return False
        return model_dir.is_file() or any((model_dir / name).exists() for name in TOKENIZER_FILES)  # file: a GGUF

    @property
    def tokenizer(self):
        if self._tokenizer is None and self.adapter_dir is not None and (self.adapter_dir / "tokenizer.json").exists():
            from reference_engine.tokenizer import Tokenizer
            self._tokenizer = Tokenizer.from_pretrained(self.adapter_dir)   # an adapter that added tokens
        if self._tokenizer is None:
            if not self.has_tokenizer:
                raise ModelDirError(self.core.model_dir or "<engine>", "no tokenizer.json in the model directory")
            from reference_engine.tokenizer import Tokenizer
            self._tokenizer = Tokenizer.from_pretrained(self.core.model_dir)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, value) -> None:
        self._tokenizer = value

    # ---- stage 2: the core (what the generate loop and the checks call) --------------------------------
    config = property(lambda self: self.core.config)
    weights = property(lambda self: self.core.weights)
    rope = property(lambda self: self.core.rope)
    cache = property(lambda self: self.core.cache)
    device = property(lambda self: self.core.device)
    dtype = property(lambda self: self.core.dtype)
    model_dir = property(lambda self: self.core.model_dir)
    windows = property(lambda self: self.core.windows)

    def prefill(self, seq_ids, token_lists, *, all_logits=False, capture=None):
        return self.core.prefill(seq_ids, token_lists, all_logits=all_logits, capture=capture)

    def decode(self, seq_ids, token_ids, *, capture=None):
        return self.core.decode(seq_ids, token_ids, capture=capture)

    def logits(self, token_ids, *, capture=None):
        return self.core.logits(token_ids, capture=capture)

    def logits_many(self, token_lists, *, captures=None, dtypes=None, variants=None):
        """float32 logits [len(ids), vocab] per token list, as `logits` gives each, all in one pass over the
        weights when streaming; dtypes[i] (e.g. torch.bfloat16) runs list i as a low-precision shadow;
        variants[i] (sweep.NormShift) runs it on adjusted weights."""
        from reference_engine.streaming.sweep import LogitsRequest, logits_many
        n = len(token_lists)
        captures, dtypes, variants = captures or [None] * n, dtypes or [None] * n, variants or [None] * n
        return logits_many(self.core, [LogitsRequest(list(t), c, d, v)
                                       for t, c, d, v in zip(token_lists, captures, dtypes, variants)])

    def run_scripts(self, scripts):
        """Steps whose tokens are known in advance (streaming/scripted.py): per script and step, float32 logits as
        prefill/decode return them; step by step when resident, all in one pass over the weights when streaming."""
        from reference_engine.streaming.scripted import run_scripts
        return run_scripts(self.core, scripts)

    def run_pass(self, requests, scripts, step=None):
        """Throwaway prefills (sweep.LogitsRequest), scripts and a step of sequences the caller keeps
        (scripted.LiveStep: a prefill or a decode), all in ONE pass over the weights when streaming; each as it
        runs alone when resident. -> (logits per request, results per script, the step's logits or None)."""
        from reference_engine.streaming.scripted import run_pass
        return run_pass(self.core, requests, scripts, step)

    streaming = property(lambda self: getattr(self.core, "streaming", False))

    def fork(self, parent_id, child_id) -> None:
        self.core.fork(parent_id, child_id)

    def free(self, seq_id) -> None:
        self.core.free(seq_id)

    def scratch(self, count: int = 1):
        return self.core.scratch(count)

    def validate(self, logits=None, *, positions=None, max_abs_logit: float = 100.0) -> list[str]:
        return self.core.validate(logits, positions=positions, max_abs_logit=max_abs_logit)

    # ---- stage 3: generation -------------------------------------------------------------------------
    def generate(self, prompts, sampling_params=None, **kw):
        from reference_engine.generate import generate
        return generate(self, prompts, sampling_params, **kw)

    def stream(self, prompt, sampling_params=None, **kw):
        from reference_engine.generate import stream
        return stream(self, prompt, sampling_params, **kw)

    def __repr__(self) -> str:
        if self.adapter_dir is not None:
            return (f"Engine({str(self.core.model_dir)!r}, adapter={str(self.adapter_dir)!r}, "
                    f"device={self.core.device}, dtype={self.core.dtype})")
        return f"Engine({str(self.core.model_dir)!r}, device={self.core.device}, dtype={self.core.dtype})"


def _path(value) -> Path | None:
    return None if value is None else Path(value)
