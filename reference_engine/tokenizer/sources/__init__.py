"""Tokenizers read from files other than tokenizer.json: a SentencePiece tokenizer.model (sentencepiece_model.py:
the bounded protobuf reader; spm_tokenizer.py: the Tokenizer it makes), tiktoken and tekken files, and a GGUF's
tokenizer metadata (gguf_tokenizer.py, gguf_pre.py: llama.cpp's pre-tokenizer names)."""
