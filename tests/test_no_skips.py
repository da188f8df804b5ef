"""No test skips on a machine set up by `scripts/setup.sh --test`: what it installs is imported plainly (a missing
package fails collection, or the test, naming the install step), a missing asset fails through assets.or_fail, and
a branch that does not apply to one parametrization asserts what does apply there. A skip would let a run pass
that checked nothing; this reads every test file for one. The one exception is a fact of the machine's hardware
(a CPU without an instruction set a kernel needs), marked on its line with a comment saying "hardware fact"."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SKIPS = re.compile(r"\bimportorskip\(|\bpytest\.skip\(|\bmark\.skip(if)?\b|\bxfail\b")
HARDWARE = "hardware fact"


def skips(path: Path) -> list[str]:
    return [f"{path.relative_to(TESTS.parent)}:{number}: {line.strip()}"
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if SKIPS.search(line) and HARDWARE not in line]


def test_no_test_file_skips():
    found = [line for path in sorted(TESTS.rglob("*.py")) if path != Path(__file__).resolve() for line in skips(path)]
    assert found == [], "\n".join(found)
