"""The layer rule, read from the source: llmdoctor -> checks -> probes -> reference_engine; findings and reports
at the side. A lazy import inside a function counts the same as one at the top."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("reference_engine", "probes", "checks", "llmdoctor", "findings", "reports")
# what each package may import among ours (itself always)
ALLOWED = {
    "reference_engine": set(),
    "findings": set(),
    "reports": {"findings"},
    "probes": {"findings", "reference_engine"},
    "checks": {"findings", "probes", "reference_engine"},
    "llmdoctor": {"findings", "probes", "checks", "reference_engine", "reports"},
}
# inside the engine a stage never reaches forward: files < tokenizer, core < generate; the core never sees the
# tokenizer. Nothing inside a stage imports the facade (reference_engine.engine) or the testing tools.
LATER = {
    "reference_engine.files": ("reference_engine.tokenizer", "reference_engine.core", "reference_engine.generate"),
    "reference_engine.tokenizer": ("reference_engine.core", "reference_engine.generate"),
    "reference_engine.core": ("reference_engine.tokenizer", "reference_engine.generate"),
    "reference_engine.generate": ("reference_engine.tokenizer",),
}

def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: relative import; use absolute imports so the layer rule can be read")
    return out


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package):
    bad = []
    for path in sources(package):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in PACKAGES and top != package and top not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("stage", sorted(LATER))
def test_engine_stages_do_not_reach_forward(stage):
    forbidden = LATER[stage] + ("reference_engine.engine", "reference_engine.testing")
    bad = [f"{path.relative_to(ROOT)} imports {module}"
           for path in sources(stage.replace(".", "/")) for module in imported_modules(path)
           if module.startswith(forbidden)]
    assert not bad, "\n".join(bad)


def test_reports_know_only_the_findings_model():
    for path in sources("reports"):
        ours = {m.split(".")[0] for m in imported_modules(path)} & set(PACKAGES)
        assert ours <= {"reports", "findings"}, f"{path.name} imports {ours}"


def test_the_public_names_import():
    import llmdoctor
    from reference_engine import Engine, SamplingParams, Tokenizer
    assert callable(llmdoctor.check) and Engine.from_pretrained and Tokenizer.from_pretrained and SamplingParams()


def module_graph() -> dict[str, set[str]]:
    """Our modules -> the modules of ours they import (lazy imports too). `from pkg import sub` is an edge to the
    submodule only. A package's __init__ is left out as an importer: the facades (reference_engine's lazy names,
    llmdoctor.check) re-export what lies below them, which is no circle between modules."""
    names = {}
    for package in PACKAGES:
        for path in sources(package):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in names.items():
        if path.name == "__init__.py":
            continue
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{alias.name}" for alias in node.names}
                edges.update(subs if subs <= names.keys() else subs | {node.module})
        graph[name] = {m for m in edges if m in names and m != name and not names[m].name == "__init__.py"}
    return graph


def test_no_import_circles():
    """No module reaches itself through its imports: a circle works only in the order that happens to import
    one side first (`python -c "import llmdoctor.cli_endpoint"` failed while cli.py imported cli_probe first)."""
    graph = module_graph()
    circles, done = [], set()

    def visit(module, path):
        if module in path:
            circles.append(" -> ".join(path[path.index(module):] + [module]))
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not circles, "\n".join(circles)
