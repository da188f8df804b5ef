"""Reports a person reads: errors and warnings first, passed checks collapsed below, tabular evidence as tables
(HTML <table>, aligned terminal columns), never as a JSON dump."""
from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser

import pytest

from findings import CheckRun, Finding, Report
from reports import render
from reports.evidence import cell, elided, is_table, number, split_evidence, value_text

from tests.reports.conftest import DTYPE_TABLE, LAYER_COLUMNS, LAYER_TABLE


def rendered(report, fmt: str, **options) -> str:
    stream = io.StringIO()
    render(report, fmt, stream, **options)
    return stream.getvalue()


def clean_report() -> Report:
    runs = [CheckRun("FIL001", "files", "passed", 0.01, "Files present."),
            CheckRun("ACT001", "activations", "passed", 0.5, "Activation statistics.")]
    note = Finding("ACT001", "activations", "info", "activation statistics over 2 probes",
                   {"table": LAYER_TABLE[:4], "columns": LAYER_COLUMNS})
    return Report(model="m", fingerprint=None, tool_version="0", generated_at="2026-01-01T00:00:00+00:00",
                  checks=runs, findings=[note])


# ---------------------------------------------------------------------------------------------------- evidence

def test_lists_of_records_become_tables_in_the_given_column_order():
    items, tables = split_evidence({"table": LAYER_TABLE, "columns": LAYER_COLUMNS, "layer": 7})
    assert items == [("layer", 7)]                       # "columns" only ordered the table: not shown again
    (table,) = tables
    assert table.key == "table" and table.columns == LAYER_COLUMNS and len(table.rows) == 50
    assert table.rows[0] == ["0", "attn", "-3", "2.9", "0.01", "3", "0"]
    assert table.numeric == [True, False, True, True, True, True, True]


def test_cells_are_short_and_nested_dicts_inline():
    _, (table,) = split_evidence({"table": DTYPE_TABLE})
    assert table.columns == ["dtype", "mean_kl", "peak", "peak_at", "top1_agreement"]
    assert table.rows[0] == ["float32", "0", "72000", "layer 7, module mlp", "1"]
    assert table.rows[1][1] == "0.00123" and table.rows[2][1:4] == ["-", "65504", "-"]
    assert table.numeric == [False, True, True, False, True]


@pytest.mark.parametrize("value", [[], [1, 2, 3], [{"a": 1}, 2], [{"a": {"deep": {"er": 1}}}], "text", {"a": 1},
                                   [{"a": [1] * 20}]])
def test_other_values_are_not_tables(value):
    assert not is_table(value)


@pytest.mark.parametrize("value, text", [(65504.0, "65504"), (0.0, "0"), (15.829967, "15.83"), (0.5, "0.5"),
                                         (-0.0011207, "-0.001121"), (2.58e-05, "2.58e-05"), (1234567.0, "1.235e+06"),
                                         (float("nan"), "nan"), (float("-inf"), "-inf")])
def test_numbers_keep_four_significant_digits(value, text):
    assert number(value) == text


def test_values_read_as_text_not_json():
    assert cell(True) == "yes" and cell(None) == "-" and cell([1, "a"]) == '[1, "a"]'
    assert value_text({"overall": 0.7361111, "rows": [0.4583333, 1.0]}) == "overall 0.7361, rows [0.4583, 1]"
    assert len(value_text(list(range(1000)))) <= 400


def test_one_line_evidence_brackets_nested_dicts():
    from reports.summary import compact_evidence
    assert compact_evidence({"at": {"layer": 1, "module": "mlp"}, "peak": 432211.3, "ok": True}) == \
        "at=(layer 1, module mlp), peak=432211, ok=yes"


def test_elided_keeps_head_and_tail():
    rows = list(range(50))
    shown, left_out = elided(rows, 10)
    assert shown == [0, 1, 2, 3, 4, 45, 46, 47, 48, 49] and left_out == 40
    assert elided(rows[:12], 10) == (rows[:12], 0)    # hiding two rows is not worth a gap


# ---------------------------------------------------------------------------------------------------- terminal

def test_terminal_puts_problems_first_and_collapses_passed_checks(sample_report):
    text = rendered(sample_report, "table", colour=False)
    lines = text.splitlines()
    passed = next(i for i, line in enumerate(lines) if line.startswith("passed ("))
    order = [lines.index("problems"), lines.index("notes"), passed, lines.index("skipped:")]
    assert order == sorted(order)
    problems = "\n".join(lines[order[0]:order[1]])
    assert re.findall(r"^  (ERROR|WARNING|INFO) ", problems, re.M) == ["ERROR", "ERROR", "WARNING", "WARNING"]
    notes = "\n".join(lines[order[1]:order[2]])
    assert re.findall(r"^  (ERROR|WARNING|INFO) ", notes, re.M) == ["INFO", "INFO"]
    assert lines[order[2]] == "passed (3): FIL001, EMB001, NUM003"      # one compact line, nothing else of them
    assert "Files present." not in text


def test_terminal_tables_are_aligned_columns_not_json(sample_report):
    text = rendered(sample_report, "table", colour=False)
    assert "[{" not in text and '{"' not in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("table: 3 rows"))
    at = next(i for i in range(start + 1, len(lines)) if set(lines[i].strip()) == {"-", " "})
    header, rule, rows = "\n".join(lines[start + 1:at]), lines[at], lines[at + 1:at + 4]
    for word in ("dtype", "mean", "kl", "peak", "at", "top1", "agreement"):   # headers wrap at their words
        assert word in header.split()
    starts = [m.start() for m in re.finditer(r"-+", rule)]
    ends = [m.end() for m in re.finditer(r"-+", rule)]
    assert len(starts) == 5
    assert [r.split()[0] for r in rows] == ["float32", "bfloat16", "float16"]
    for row in rows:
        assert len(row) <= ends[-1]
        assert row[ends[1] - 1] != " " and row[ends[2] - 1] != " "   # numeric columns end at the rule's end
        assert row[starts[3]] != " "                                  # a text column starts where its rule does
    assert "layer 7, module mlp" in rows[0]


def test_terminal_elides_long_tables_with_a_count(sample_report):
    text = rendered(sample_report, "table", colour=False)
    assert "table: 50 rows (10 not shown: --format html or json has all)" in text
    block = text[text.index("table: 50 rows"):]
    assert re.search(r"^\s+\.\.\.\s+\.\.\.", block, re.M)     # the gap row
    assert " 24  mlp " in block and "  0  attn" in block   # the last and the first rows survive


def test_terminal_says_when_nothing_is_wrong():
    text = rendered(clean_report(), "table", colour=False)
    assert "problems\n  no errors or warnings" in text and "passed (2): FIL001, ACT001" in text
    assert "table: 4 rows" in text


# ---------------------------------------------------------------------------------------------------- HTML

class Outline(HTMLParser):
    """Records section/details ids with their open flag, severity badges per section, and evidence tables."""

    def __init__(self):
        super().__init__()
        self.blocks, self.badges, self.tables, self.where, self._cell = [], {}, [], None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("section", "details") and a.get("id"):
            self.where = a["id"]
            self.blocks.append((a["id"], tag, "open" in a))
        if tag == "span" and a.get("class", "").startswith("badge ") and self.where in ("problems", "notes"):
            self._cell = ("badge", [])
        if tag == "table" and self.where in ("problems", "notes"):
            self.tables.append({"head": [], "rows": []})
        if tag in ("th", "td") and self.tables and self.where in ("problems", "notes"):
            self._cell = (tag, [])

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1].append(data)

    def handle_endtag(self, tag):
        if self._cell is None:
            return
        kind, parts = self._cell
        text = "".join(parts).strip()
        if kind == "badge" and tag == "span":
            self.badges.setdefault(self.where, []).append(text)
            self._cell = None
        elif kind == tag == "th":
            self.tables[-1]["head"].append(text)
            self._cell = None
        elif kind == tag == "td":
            rows = self.tables[-1]["rows"]
            if not rows or len(rows[-1]) == len(self.tables[-1]["head"]):
                rows.append([])
            rows[-1].append(text)
            self._cell = None


def outline(report) -> Outline:
    parser = Outline()
    parser.feed(rendered(report, "html"))
    return parser


def test_html_orders_problems_then_notes_and_collapses_passed(sample_report):
    page = outline(sample_report)
    assert [(b[0], b[1], b[2]) for b in page.blocks] == [("problems", "section", False), ("notes", "section", False),
                                                         ("passed", "details", False), ("skipped", "details", False)]
    assert page.badges["problems"] == ["error", "error", "warning", "warning"]
    assert page.badges["notes"] == ["info", "info"]


def test_html_evidence_tables_are_tables(sample_report):
    text = rendered(sample_report, "html")
    assert "[{" not in text and "&#34;layer&#34;" not in text and '{"' not in text
    tables = outline(sample_report).tables
    layers = next(t for t in tables if t["head"] == LAYER_COLUMNS)
    assert len(layers["rows"]) == 50 and layers["rows"][0] == ["0", "attn", "-3", "2.9", "0.01", "3", "0"]
    dtypes = next(t for t in tables if t["head"][:1] == ["dtype"])
    assert [r[0] for r in dtypes["rows"]] == ["float32", "bfloat16", "float16"]
    assert dtypes["rows"][0][3] == "layer 7, module mlp"
    assert re.search(r'<div class="scroll"><table>\s*<thead><tr><th class="num">layer', text)  # 50 rows scroll


def test_html_says_when_nothing_is_wrong():
    text = rendered(clean_report(), "html")
    assert "No errors or warnings." in text and "Passed checks (2)" in text
    assert outline(clean_report()).badges == {"notes": ["info"]}


# ---------------------------------------------------------------------------------------------------- screenshot

STRIPES = {"error": (0xdc, 0x26, 0x26), "warning": (0xd9, 0x77, 0x06), "info": (0x02, 0x84, 0xc7)}


def test_screenshot_shows_errors_then_warnings_then_notes(sample_report, tmp_path):
    """The page as Chromium draws it: the coloured edges of the finding cards appear top to bottom as error,
    warning, info. `scripts/setup.sh --test` installs chromium with the system's package manager
    (scripts/chromium.sh); where it could not, this fails naming the install step, never a skip."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("no chromium on PATH: run scripts/chromium.sh (scripts/setup.sh --test runs it; as root or with "
                    "passwordless sudo), or install it yourself: apt-get install chromium")
    page = tmp_path / "report.html"
    page.write_text(rendered(sample_report, "html"), encoding="utf-8")
    png = tmp_path / "report.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
                           "--force-device-scale-factor=0.5", "--window-size=1000,3200", f"--screenshot={png}",
                           page.as_uri()], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    width, height, pixels = read_png(png.read_bytes())
    assert (width, height) == (500, 1600)
    # the cards share their left edge: read the colour of that pixel column (plots drawn inside the cards use
    # the same red, further right)
    top = next(y for y in range(height) if STRIPES["error"] in pixels[y])
    edge = pixels[top].index(STRIPES["error"])
    column = [next((name for name, colour in STRIPES.items() if colour in pixels[y][edge:edge + 2]), None)
              for y in range(height)]
    runs = [name for y, name in enumerate(column) if name and (y == 0 or column[y - 1] != name)]
    assert runs == ["error", "error", "warning", "warning", "info", "info"]   # one card edge per finding


def read_png(data: bytes) -> tuple[int, int, list[list[tuple]]]:
    """(width, height, rows of RGB pixels) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, kind, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    assert depth == 8 and kind in (2, 6) and interlace == 0, (depth, kind, interlace)
    channels, idat, pos = (3 if kind == 2 else 4), b"", 8
    while pos < len(data):
        length, tag = struct.unpack(">I4s", data[pos:pos + 8])
        idat += data[pos + 8:pos + 8 + length] if tag == b"IDAT" else b""
        pos += 12 + length
    raw, stride, prev, rows = zlib.decompress(idat), width * channels, bytearray(width * channels), []
    for y in range(height):
        kind_of_filter, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        unfilter(kind_of_filter, line, prev, channels)
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, channels)])
        prev = line
    return width, height, rows


def unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up, corner = prev[i], (prev[i - bpp] if i >= bpp else 0)
        if kind == 1:
            line[i] = (line[i] + left) & 255
        elif kind == 2:
            line[i] = (line[i] + up) & 255
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 255
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
