"""--select / --ignore, the way ruff does it: a selector is a check id (VOC001), an id prefix (VOC, VOC0),
a category name (vocab) or ALL. When a check matches both lists, the more specific selector wins; on a tie,
ignore wins. A retired id (checks.catalogue.registry.RETIRED, e.g. KVC001) selects the check that replaced it, with a
note."""
from __future__ import annotations

import sys

from checks.catalogue.registry import FAMILIES, RETIRED, CheckSpec
from findings import CATEGORIES


class SelectionError(ValueError):
    """A selector matches no check id, id prefix or category."""


def parse_selectors(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """'VOC,tokenizer' or ['VOC', 'tokenizer'] (or repeated options) -> ['VOC', 'tokenizer']."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def specificity(selector: str, spec: CheckSpec) -> int | None:
    """How specifically `selector` names `spec` (higher = more specific), None when it does not match."""
    if selector.upper() == "ALL":
        return 0
    if selector.lower() == spec.category:
        return 3  # as specific as a family prefix: a category is a family or a group of them
    if spec.id.startswith(selector.upper()):
        return len(selector)
    return None


def validate_selectors(selectors: list[str], specs: list[CheckSpec]) -> None:
    for selector in selectors:
        if selector.upper() == "ALL" or selector.lower() in CATEGORIES:
            continue
        upper = selector.upper()
        if any(s.id.startswith(upper) for s in specs) or (upper[:3] in FAMILIES and _id_shaped(upper)):
            continue
        raise SelectionError(f"unknown selector {selector!r}: not a check id, id prefix, category or ALL "
                             f"(see `llmdoctor checks`)")


def _id_shaped(text: str) -> bool:
    digits = text[3:]
    return len(text) <= 6 and text[:3].isalpha() and (digits == "" or digits.isdigit())


def resolve_retired(selectors: list[str]) -> tuple[list[str], list[str]]:
    """(selectors with every retired id replaced by the id that took over, one note per replacement).
    Ids are never reused, so a pipeline written against an old id keeps selecting the same check."""
    resolved, notes = [], []
    for selector in selectors:
        moved = RETIRED.get(selector.strip().upper())
        if moved is None:
            resolved.append(selector)
            continue
        resolved.append(moved[0])
        notes.append(f"{selector.upper()} is retired and now runs as {moved[0]} ({moved[1]}); "
                     f"use {moved[0]} in --select/--ignore")
    return resolved, notes


def select_checks(specs: list[CheckSpec], select: list[str] | None = None,
                  ignore: list[str] | None = None, notes=None) -> list[CheckSpec]:
    """The checks to run, in catalogue order. No select means ALL. Retired ids resolve to their successor;
    the notes saying so go to `notes` (a list) when given, else to stderr."""
    select, select_notes = resolve_retired(list(select) if select else ["ALL"])
    ignore, ignore_notes = resolve_retired(list(ignore or []))
    for note in dict.fromkeys(select_notes + ignore_notes):
        if notes is None:
            print(f"llmdoctor: note: {note}", file=sys.stderr)
        else:
            notes.append(note)
    validate_selectors(select + ignore, specs)
    return [spec for spec in specs if is_selected(spec, select, ignore)]


def is_selected(spec: CheckSpec, select: list[str], ignore: list[str]) -> bool:
    chosen = _best(spec, select)
    if chosen is None:
        return False
    dropped = _best(spec, ignore)
    return dropped is None or chosen > dropped


def _best(spec: CheckSpec, selectors: list[str]) -> int | None:
    scores = [s for s in (specificity(sel, spec) for sel in selectors) if s is not None]
    return max(scores) if scores else None


def category_selected(category: str, select: list[str] | None, ignore: list[str] | None) -> bool:
    """Whether a whole category is in the run (used for check modules that failed to import)."""
    select = list(select) if select else ["ALL"]
    chosen = max((0 if s.upper() == "ALL" else 3 for s in select
                  if s.upper() == "ALL" or s.lower() == category), default=None)
    if chosen is None:
        return False
    dropped = max((0 if s.upper() == "ALL" else 3 for s in ignore or []
                   if s.upper() == "ALL" or s.lower() == category), default=None)
    return dropped is None or chosen > dropped
