"""What several check families share: the probe prompts and the engine runs over them (prompts.py, probe_runs.py,
logit_compare.py, passes.py: the shared engine passes the runner builds), the tensor roles and the weight scan
(tensor_layout.py, tensor_scan.py), the token table across tokenizer files (token_table.py),
end-of-turn tokens, the conversations that exercise a chat template, and the baseline file format."""
