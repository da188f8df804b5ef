"""ENG, KVC: self-tests of llmdoctor's own reference engine (paged decode vs recompute, padded batches, the KV
cache) — a finding here is a bug in the tool, not in the model."""
