"""The DIF family: `llmdoctor diff REF CAND` compares two models (checks/diff/pair.py: PairInputs). Its checks
declare needs=("pair",) and run only under `llmdoctor diff` (llmdoctor/run/diff_runner.py), never under `check`.
Sections: config_files (DIF001-005), tokenizer (DIF010-011), weights (DIF020-021), logits (DIF030),
layers (DIF040), generation (DIF050)."""
from checks.diff import config_files, generation, layers, logits, tokenizer, weights  # noqa: F401  (registers)
