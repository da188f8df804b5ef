"""The glue between a run and the renderers in reports/: where each finding is and its identity across runs
(locate.py, json_lines.py), probe results as a Report (probe_report.py), the SARIF rules (ci_rules.py), and the
text `explain` prints for a check id or an error message (explain_text.py, signatures.py)."""
