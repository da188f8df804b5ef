"""`llmdoctor triage`: the incident bundle (bundle.py) and its isolated probe and check parts (parts.py)."""
