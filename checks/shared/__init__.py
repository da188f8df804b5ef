"""What several check families share: the probe prompts and the engine runs over them (prompts.py, probe_runs.py,
logit_compare.py, passes.py: the shared engine passes the runner builds; chunked_prefill.py, scoring.py,
standing.py), the token table across tokenizer files (token_table.py) and the baseline file format
(baseline_file.py); weights/: the tensor roles, the weight scan and the initialisation verdict; chat/: the
conversations that exercise a chat template and the end-of-turn token."""
