"""The subword models: BPE by merge rank (bpe.py, Hugging Face), BPE by piece score (spm.py, sentencepiece), and
merge_cuts.py (where a piece may be cut before merging without changing the result)."""
