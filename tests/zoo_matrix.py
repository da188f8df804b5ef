"""The fault zoo's confusion matrix (rows: faults, columns: the checks that fired), printed in the terminal summary.

A zoo test records its row with the `confusion` fixture (tests/conftest.py); the row travels in the test report's
user_properties, so rows made in pytest-xdist workers reach the controller that prints the summary."""
from __future__ import annotations

ROWS: dict[str, tuple[str, list[str]]] = {}      # fault name -> (expected check, sorted "ID:severity" that fired)
SEVERITY_MARK = {"error": "E", "warning": "W", "info": "i"}
KEY = "fault-zoo"


def collect(report) -> None:
    """Keep the rows a finished test recorded (pytest_runtest_logreport, in the process that prints)."""
    for key, value in getattr(report, "user_properties", ()):
        if key == KEY:
            name, expected, fired = value
            ROWS[name] = (expected, list(fired))


def write(terminalreporter) -> None:
    if not ROWS:
        return
    ids = sorted({f.split(":")[0] for _, fired in ROWS.values() for f in fired})
    line = terminalreporter.write_line
    terminalreporter.section("fault zoo confusion matrix (rows: faults, E/W/i: severity fired, * = expected)")
    width = max(len(name) for name in ROWS)
    line(" " * (width + 2) + " ".join(i[:3] for i in ids))
    line(" " * (width + 2) + " ".join(i[3:] for i in ids))
    for name, (expected, fired) in sorted(ROWS.items()):
        marks: dict[str, str] = {}
        for item in fired:  # the highest severity per check: E > W > i
            check_id, severity = item.split(":")
            mark = SEVERITY_MARK[severity]
            if check_id not in marks or "EWi".index(mark) < "EWi".index(marks[check_id]):
                marks[check_id] = mark
        cells = [(marks.get(i, ".") + ("*" if i == expected else " ")).ljust(3) for i in ids]
        line(f"{name.ljust(width)}  " + " ".join(cells))
