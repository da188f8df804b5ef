"""The serving chain: tool calls (their history ids, zero-argument calls), every message reaching the
served prompt, reasoning split (and thinking off), structured output, silent prompt cuts and greedy parity across
streaming and caches, each probed end to end on a live server (EPT07x tools, EPT08x the rest).
Importing this package registers the checks."""
from checks.endpoint.chain import (  # noqa: F401 (registers)
    call_ids, parity, prompt_length, reasoning, served_messages, structured, tools, zero_args)
