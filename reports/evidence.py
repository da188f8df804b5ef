"""Evidence laid out for a person: lists of records (activation statistics per layer, numerics per dtype, tensors
judged) become tables; everything else stays a key/value item. Shared by the terminal and HTML reports.

A value is a table when it is a non-empty list of dicts whose values are scalars (or small dicts of scalars, shown
inline as "layer 4, module mlp"). Column order: the evidence's own "columns" list when it names the table's
keys (ACT001 gives one), else the keys in first-seen order."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_COLUMNS = 24
SCALARS = (str, int, float, bool, type(None))


@dataclass
class EvidenceTable:
    key: str                   # the evidence key it came from ("table", "not_at_init", ...)
    columns: list[str]
    rows: list[list[str]]      # formatted cells, one list per record, in column order
    numeric: list[bool]        # per column: every value a number (right-aligned)


def split_evidence(evidence: dict) -> tuple[list[tuple[str, object]], list[EvidenceTable]]:
    """(key/value items in key order, tables) of one finding's evidence."""
    order = evidence.get("columns")
    order = [c for c in order if isinstance(c, str)] if isinstance(order, list) else []
    items, tables = [], []
    for key in sorted(evidence):
        value = evidence[key]
        table = as_table(key, value, order) if is_table(value) else None
        if table is not None:
            tables.append(table)
        else:
            items.append((key, value))
    if order and any(set(t.columns) <= set(order) for t in tables):
        items = [(k, v) for k, v in items if k != "columns"]   # it only said how to order the table
    return items, tables


def is_table(value) -> bool:
    if not isinstance(value, list) or not value or not all(isinstance(row, dict) and row for row in value):
        return False
    keys = {k for row in value for k in row}
    return len(keys) <= MAX_COLUMNS and all(_flat(v) for row in value for v in row.values())


def as_table(key: str, rows: list[dict], order: list[str] | None = None) -> EvidenceTable:
    seen = list(dict.fromkeys(k for row in rows for k in row))
    columns = [c for c in order if c in seen] if order and set(seen) <= set(order) else seen
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    numeric = [all(_is_number(row.get(c)) for row in rows if row.get(c) is not None) for c in columns]
    return EvidenceTable(key, [str(c) for c in columns], cells, numeric)


def cell(value) -> str:
    """One value as a short human string: 4 significant digits, '-' for missing, inline k/v for small dicts."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {cell(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        text = "[" + ", ".join(json.dumps(v) if isinstance(v, str) else cell(v) for v in value) + "]"
        return text if len(text) <= 60 else text[:56] + " ...]"
    return str(value)


def number(value: float) -> str:
    """4 significant digits, in plain notation from 0.001 up to a million (65504.0 -> '65504', not '6.55e+04')."""
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e6:
        if value.is_integer():
            return str(int(value))
        text = f"{value:.{max(0, 3 - math.floor(math.log10(abs(value))))}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{value:.4g}"


def value_text(value, limit: int = 400) -> str:
    """A key/value item's value on one line: strings as they are, numbers shortened, nested values spelled
    out with shortened numbers ("overall 0.7361, rows [0.4583, 0.6667]"), cut at `limit` characters."""
    if isinstance(value, str):
        return value
    text = _inline(value)
    return text if len(text) <= limit else text[:limit - 4] + " ..."


def _inline(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_inline(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json.dumps(v, ensure_ascii=False) if isinstance(v, str) else _inline(v)
                               for v in value) + "]"
    return cell(value)


def elided(rows: list, limit: int) -> tuple[list, int]:
    """About `limit` rows: the first and last ones, and the count of those left out between them (0: none)."""
    if len(rows) <= limit + 3:      # hiding a row or three saves nothing worth a gap in the table
        return rows, 0
    head = (limit + 1) // 2
    tail = limit - head
    return rows[:head] + rows[len(rows) - tail:], len(rows) - limit


def _flat(value) -> bool:
    if isinstance(value, dict):
        return len(value) <= 4 and all(isinstance(v, SCALARS) for v in value.values())
    if isinstance(value, (list, tuple)):
        return len(value) <= 8 and all(isinstance(v, SCALARS) for v in value)
    return isinstance(value, SCALARS)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
