"""Tokenizers read from files other than tokenizer.json: a SentencePiece tokenizer.model (sentencepiece_model.py:
the bounded protobuf reader; precompiled_charsmap.py: its normalization map, a bounded double-array trie;
spm_normalizer.py: sentencepiece's normalizer and user-defined-piece matcher; spm_tokenizer.py: the Tokenizer it
makes), tiktoken and tekken files, and a GGUF's tokenizer metadata (gguf_tokenizer.py, gguf_pre.py: llama.cpp's
pre-tokenizer names)."""
