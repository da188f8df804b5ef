"""VOC, EMB: token ids against the embedding rows (token_ids.py) and the embedding/lm_head rows themselves
(embeddings.py; special_rows.py finds special tokens whose rows were never trained, also used by `llmdoctor fix`)."""
