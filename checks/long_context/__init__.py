"""CTX: long context. Does the model still read far out: the copy test with its two copies up to
N tokens apart and a natural passage at increasing positions (probes/competence/distance.py), prefilled in
chunks through the paged cache (runs.py), judged with the competence family's bounds (distance.py), and the
boundary the config puts near where reading stops (boundaries.py). The static long-context config checks
(CFG060+, declared.py + config_checks.py), the GGUF metadata against its config (GGF020+) and what changed
between two models (DIF060+) live here too, as one reading of the long-context settings."""
