"""Incremental detokenization for streaming, with stop strings matched on text.

Built around a `decode(ids) -> str` callable, so it works with any tokenizer (byte-level BPE, SentencePiece
with byte_fallback, ...) without knowing its internals. Each push decodes all ids so far and emits only the
part of the text that can no longer change:

- a trailing run of U+FFFD is held back: a byte-level or byte_fallback token may carry the first bytes of a
  multi-byte character (a CJK character or an emoji split over tokens); until the rest arrives the decoder
  shows U+FFFD, which later turns into the real character;
- trailing spaces are held back: tokenizers that clean up spaces before punctuation ("a ." -> "a.") rewrite
  them when the next token arrives;
- with stop strings, the last len(longest stop) - 1 characters are held back so a stop string split over
  tokens is never streamed half-way; a matched stop string and everything after it is cut from the text
  (as vLLM does), and the request ends with finish_reason "stop".

So every delta is valid text, and the deltas concatenate to decode(all ids) (or to the text before the stop
string). The cost is one decode of the generated ids per token, negligible next to a forward pass.
"""
from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str], stop: Sequence[str] = ()):
        self.decode = decode
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1  # chars a partial stop string may span
        self.ids: list[int] = []
        self.emitted = ""             # text already handed out
        self.stopped_on: str | None = None  # the stop string that ended the text, if any
        self.unstable = False         # the final decode does not start with the streamed text

    @property
    def finished(self) -> bool:
        return self.stopped_on is not None

    def push(self, token_id: int) -> str:
        """Add one generated id; return the new text that is safe to show (often "")."""
        return self.extend([token_id])

    def extend(self, token_ids: Sequence[int]) -> str:
        if self.finished:
            return ""
        self.ids.extend(token_ids)
        text = self.decode(self.ids)
        if self._match_stop(text):
            return self._emit_until(text, text.find(self.stopped_on, self._search_from()))
        return self._emit_until(text, self._safe_end(text))

    def finish(self) -> str:
        """The request ended: flush everything that was held back."""
        if self.finished:
            return ""
        return self._emit_until(self.decode(self.ids), None)

    @property
    def text(self) -> str:
        return self.emitted

    # ------------------------------------------------------------------------------------------ internals

    def _search_from(self) -> int:
        # every stop string starting before len(emitted) would already have been seen whole (see hold)
        return len(self.emitted)

    def _match_stop(self, text: str) -> bool:
        start = self._search_from()
        hits = [(text.find(s, start), s) for s in self.stop]
        hits = [(at, s) for at, s in hits if at >= 0]
        if hits:
            self.stopped_on = min(hits)[1]
        return bool(hits)

    def _safe_end(self, text: str) -> int:
        end = len(text)
        while end > 0 and text[end - 1] == REPLACEMENT:
            end -= 1
        while end > 0 and text[end - 1] == " ":
            end -= 1
        return max(end - self.hold, 0) if self.stop else end

    def _emit_until(self, text: str, end: int | None) -> str:
        if not text.startswith(self.emitted):
            # Some decoders rewrite earlier text for a while: tokenizers' ByteFallback turns a whole run of
            # byte tokens into U+FFFDs until the run is valid UTF-8 ("中" + <0xE6> -> four U+FFFD). Wait for
            # it to settle; if it never does, the stream could not match the decode: report it.
            self.unstable = end is None
            return ""
        end = len(text) if end is None else max(end, len(self.emitted))
        delta = text[len(self.emitted):end]
        self.emitted = text[:end]
        return delta


def has_text(engine) -> bool:
    """Whether outputs get text: an engine without a tokenizer answers token-id prompts with ids only."""
    return getattr(engine, "has_tokenizer", True)


def decode_text(engine, ids, skip_special_tokens: bool) -> str:
    """The text of generated ids; "" when the model has no tokenizer (vLLM's skip_tokenizer_init)."""
    return engine.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens) if has_text(engine) else ""
