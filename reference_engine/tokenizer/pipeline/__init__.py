"""The stages of a tokenizer.json pipeline, each a small class per `type`: added tokens split out of the raw text,
normalizers, pre-tokenizers (byte_level_plan.py: the fast path for byte-level splits), post-processors, decoders."""
