"""The subword models: BPE by merge rank (bpe.py, Hugging Face), BPE by piece score (spm.py, sentencepiece),
merge_cuts.py (where a piece may be cut before merging without changing the result) and pieces.py (the meta space
"▁" and SentencePiece's piece types, defined once)."""
