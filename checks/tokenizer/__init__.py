"""TOK: the tokenizer. encoding.py (tokenizer.json well formed, byte coverage, round trips, special tokens),
chat_template.py (the template in the sandbox), sources.py and files.py (every description of the tokenizer a
directory holds, cross-checked; source_compare.py finds the shortest input two of them encode differently)."""
