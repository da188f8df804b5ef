"""Analyses the checks share, public so that `llmdoctor fix` and `llmdoctor baseline` use the same code:
probe prompts and runs, tensor scans, special/untrained embedding rows, tensor roles, token tables."""
