"""The reference side of an endpoint comparison: what the model says the server should do.

Built from a Hugging Face model directory or a GGUF file with the reference engine's public API: the tokenizer
and chat template, every id the model declares as end of sequence (config.json, all of generation_config.json's
list, the tokenizer's eos, a GGUF's eot/eom), the token the template closes a turn with, sampling defaults,
context length and RoPE. The engine (for teacher-forced logits) is loaded on first use only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from checks.shared.chat.end_of_turn import PROBE_TURN, end_of_turn
from reference_engine.config import (GenerationConfig, load_config, load_generation_config, model_dir_path)
from reference_engine.errors import ModelDirError

GGUF_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


def is_gguf(path: Path) -> bool:
    if path.is_file():
        return True
    return path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf"))


@dataclass
class Reference:
    path: Path
    kind: str                                   # "hf" or "gguf"
    tokenizer: object
    config: object                              # reference_engine ModelConfig
    generation: GenerationConfig | None
    eos_sources: dict[int, list[str]] = field(default_factory=dict)   # id -> where it is declared
    _engine: object = None
    _pieces: dict | None = None

    @classmethod
    def load(cls, path: str | Path) -> "Reference":
        """ModelDirError when the model cannot be read (the CLI prints one line and exits 2)."""
        path = Path(path)
        if not path.exists():
            raise ModelDirError(path, "not found (give a model directory or a .gguf file)")
        from reference_engine.tokenizer import Tokenizer
        if is_gguf(path):
            config, generation, extra = _gguf_side(path)
        else:
            root = model_dir_path(path)
            config, generation, extra = load_config(root), load_generation_config(root), {}
        ref = cls(path, "gguf" if is_gguf(path) else "hf", Tokenizer.from_pretrained(path), config, generation)
        ref._declare(config.eos_token_ids, "config.json eos_token_id" if ref.kind == "hf" else "GGUF eos_token_id")
        if generation is not None:
            ref._declare(generation.eos_token_ids, "generation_config.json eos_token_id")
        ref._declare([ref.tokenizer.eos_token_id], "tokenizer eos_token")
        for key, ids in extra.items():
            ref._declare(ids, key)
        return ref

    def _declare(self, ids, source: str) -> None:
        for i in ids:
            if isinstance(i, int) and source not in self.eos_sources.setdefault(i, []):
                self.eos_sources[i].append(source)

    # -- ids and text ---------------------------------------------------------------------------------
    @property
    def eos_ids(self) -> list[int]:
        return sorted(self.eos_sources)

    @property
    def bos_id(self) -> int | None:
        return self.tokenizer.bos_token_id

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    def chat_ids(self, messages: list[dict]) -> list[int]:
        """What transformers' apply_chat_template(tokenize=True) gives: the render, no extra special tokens."""
        return self.tokenizer.encode(self.render(messages), add_special_tokens=False)

    def prompt_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True)

    def piece(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def pieces(self) -> dict[str, list[int]]:
        """Decoded text of every id -> the ids with that text (a server's logprob tokens come as text)."""
        if self._pieces is None:
            table: dict[str, list[int]] = {}
            for i in range(self.tokenizer.max_token_id + 1):
                try:
                    text = self.tokenizer.decode([i])
                except Exception:  # a hole in the vocabulary
                    continue
                table.setdefault(text, []).append(i)
            self._pieces = table
        return self._pieces

    def is_special(self, token_id: int) -> bool:
        added = self.tokenizer.added_by_id.get(token_id)
        return token_id in self.tokenizer.all_special_ids or bool(added is not None and added.special)

    def special_texts(self) -> list[str]:
        """Special tokens that matter for chat: named specials and those the template renders."""
        sample = self._turn_render()
        tokens = set(self.tokenizer.all_special_tokens)
        tokens |= {t.content for t in self.tokenizer.added_by_id.values() if t.special and t.content in sample}
        return sorted(t for t in tokens if t)

    def _turn_render(self) -> str:
        try:
            return self.render(PROBE_TURN, add_generation_prompt=False)
        except Exception:  # no template, or one that refuses this shape
            return ""

    def end_of_turn(self) -> tuple[int, str] | None:
        """The special token the template writes right after an assistant answer (e.g. <|im_end|>, <|eot_id|>)."""
        return end_of_turn(self.tokenizer)

    # -- settings -------------------------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        return self.config.max_position_embeddings

    @property
    def rope(self) -> dict:
        return {"rope_theta": self.config.rope_theta, "rope_scaling": self.config.rope_scaling}

    def engine(self):
        if self._engine is None:
            from reference_engine.engine import Engine
            self._engine = Engine.from_pretrained(self.path, device="cpu", dtype="float32")
        return self._engine


def _gguf_side(path: Path):
    """GGUF: config from its metadata (reference_engine.files.gguf), no generation_config; eot/eom ids as extra EOS."""
    try:
        from reference_engine.files.gguf_config import load_gguf_config
        from reference_engine.files.gguf_file import GGUFFile, find_gguf
    except ImportError:
        raise ModelDirError(path, "this llmdoctor cannot read GGUF files; give the Hugging Face directory") from None
    gguf = GGUFFile.open(find_gguf(path) or path)
    config = load_gguf_config(gguf.path, gguf)
    extra = {f"GGUF {key.rsplit('.', 1)[1]}": [gguf.get(key)] for key in GGUF_EOS_KEYS[1:]
             if isinstance(gguf.get(key), int)}
    return config, None, extra
