"""`llmdoctor explain`: a check id prints that check's documentation (a retired id: a note and its successor's);
an id prefix or category lists its checks; any other text is matched against the known error signatures
(llmdoctor.reporting.signatures)."""
from __future__ import annotations

from importlib import import_module

import checks
from checks.catalogue.registry import ID_PATTERN, RETIRED, CheckSpec
from findings import CATEGORIES


def describe_check(spec: CheckSpec) -> str:
    needs = ", ".join(spec.needs) or "nothing"
    parts = [f"{spec.id}: {spec.summary}", f"category: {spec.category}  severity: {spec.severity.value}  "
             f"needs: {needs}"]
    if spec.doc:
        parts.append(spec.doc)
    if spec.hint:
        parts.append(f"Fix: {spec.hint}")
    return "\n\n".join(parts)


def explain(query: str) -> tuple[str, int]:
    """(text to print, exit code): 0 found, 1 no signature matched, 2 an unknown check id."""
    specs = checks.load_all()
    key = query.strip()
    by_id = {s.id: s for s in specs}
    if key.upper() in by_id:
        return describe_check(by_id[key.upper()]), 0
    if key.upper() in RETIRED and RETIRED[key.upper()][0] in by_id:
        new_id, why = RETIRED[key.upper()]
        return f"{key.upper()} is retired: it now runs as {new_id} ({why}).\n\n" + describe_check(by_id[new_id]), 0
    family = members(key, specs)
    if family:
        return "\n".join(f"{s.id}  {s.category:<12} {s.summary}" for s in family), 0
    probe_summary = probe_ids().get(key.upper())
    if probe_summary:
        return f"{key.upper()}: {probe_summary}\n\nA probe finding: `llmdoctor probe` and `llmdoctor triage` " \
               f"produce it (see docs/probes.md).", 0
    if ID_PATTERN.match(key.upper()):
        return f"unknown check id {key.upper()} (see `llmdoctor checks`)", 2
    return explain_error_text(key)


def probe_ids() -> dict[str, str]:
    """Finding ids that only the probes emit (they are not registered checks)."""
    from llmdoctor.reporting.probe_report import SUMMARIES
    return SUMMARIES


def members(key: str, specs: list[CheckSpec]) -> list[CheckSpec]:
    """The checks a category name or an id prefix (VOC, VOC0) names."""
    if key.lower() in CATEGORIES:
        return [s for s in specs if s.category == key.lower()]
    if 1 <= len(key) <= 5 and key.isalnum():
        return [s for s in specs if s.id.startswith(key.upper())]
    return []


def explain_error_text(text: str) -> tuple[str, int]:
    try:
        signatures = import_module("llmdoctor.reporting.signatures")
    except ModuleNotFoundError as e:
        if e.name != "llmdoctor.reporting.signatures":
            raise
        return f"no check id, id prefix or category named {text!r}", 2
    found = signatures.match_signatures(text)
    if hasattr(signatures, "render_explanation"):
        return signatures.render_explanation(text), 0 if found else 1
    if not found:
        return "No known error signature matched this text.", 1
    return "\n\n".join(str(item) for item in found), 0
