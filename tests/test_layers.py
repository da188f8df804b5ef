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
# Inside every package, subpackages import one way. The order is read from the tree, not from
# a list: every folder with an __init__.py below a package of ours is a node, and the graph of imports
# between nodes (lazy ones too) must have no two nodes that reach each other. Besides, nothing inside the engine
# imports the facade (reference_engine.engine) or the testing tools, and the core never sees the tokenizer or
# the generate stage (it runs on token ids alone).
ENGINE_FORBIDDEN = {
    "reference_engine.core": ("reference_engine.tokenizer", "reference_engine.generate"),
    "reference_engine.files": ("reference_engine.tokenizer", "reference_engine.core", "reference_engine.generate"),
}
CATCH_ALL = {"analysis", "utils", "util", "helpers", "helper", "common", "misc"}
MAX_MODULES = 16

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


def package_of(module: str, packages: set[str]) -> str | None:
    """The innermost package (folder with __init__.py) a dotted module name lies in."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in packages:
            return ".".join(parts[:k])
    return None


def subpackages(root: str) -> set[str]:
    return {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / root).rglob("__init__.py")}


def package_graph(root: str) -> dict[str, set[str]]:
    """Each subpackage below `root` -> the subpackages it imports, by the innermost package a module lies in. The
    modules directly in `root` (config, errors, the facade, the registry ...) are nodes of their own. A package's
    own __init__ re-exporting its children is no edge up from them."""
    packages = subpackages(root) - {root} | {".".join(p.relative_to(ROOT).with_suffix("").parts)
                                             for p in (ROOT / root).glob("*.py") if p.name != "__init__.py"}
    graph = {p: set() for p in packages}
    for path in sources(root):
        if path.name == "__init__.py":
            continue
        here = package_of(".".join(path.relative_to(ROOT).with_suffix("").parts), packages)
        if here is None:
            continue
        for module in imported_modules(path):
            there = package_of(module, packages)
            if there and there != here:
                graph[here].add(there)
    return graph


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


@pytest.mark.parametrize("root", PACKAGES)
def test_subpackages_import_one_way(root):
    graph = package_graph(root)
    assert graph, root                                # the tree was read
    both = sorted({tuple(sorted((a, b))) for a in graph for b in reaches(graph, a)
                   if a != b and a in reaches(graph, b)})
    assert not both, "subpackages that reach each other: " + ", ".join(f"{a} <-> {b}" for a, b in both)


def test_check_families_do_not_import_each_other():
    """A family (checks/vocab/, checks/runtime/, ...) imports only itself, checks/shared/ and the catalogue's
    machinery (checks/catalogue/: registry, inputs): what two families both need lives in checks/shared/, so a family
    can be read, moved or dropped alone."""
    families = {p.parent.name for p in (ROOT / "checks").glob("*/__init__.py")} - {"shared", "catalogue"}
    assert len(families) > 5, families
    bad = []
    for family in sorted(families):
        for path in sorted((ROOT / "checks" / family).rglob("*.py")):
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[0] == "checks" and len(parts) > 1 and parts[1] in families - {family}:
                    bad.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not bad, "family-to-family imports (move what they share to checks/shared/):\n" + "\n".join(bad)


def test_shared_imports_no_family():
    families = {p.parent.name for p in (ROOT / "checks").glob("*/__init__.py")} - {"shared", "catalogue"}
    bad = [f"{path.relative_to(ROOT)} imports {module}" for path in sources("checks/shared")
           for module in imported_modules(path) if module.split(".")[:2][-1] in families
           and module.startswith("checks.")]
    assert not bad, "\n".join(bad)


def test_engine_stages_do_not_reach_forward():
    bad = []
    for package in subpackages("reference_engine"):
        forbidden = ("reference_engine.engine", "reference_engine.testing")
        for stage, later in ENGINE_FORBIDDEN.items():
            if package == stage or package.startswith(stage + "."):
                forbidden += later
        if package in ("reference_engine", "reference_engine.testing"):
            continue
        for path in sorted((ROOT / package.replace(".", "/")).glob("*.py")):
            bad += [f"{path.relative_to(ROOT)} imports {m}" for m in imported_modules(path) if m.startswith(forbidden)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("root", PACKAGES)
def test_folders_are_small_and_plainly_named(root):
    too_big, catch_all = [], []
    for folder in [ROOT / root, *(p for p in (ROOT / root).rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = list(folder.glob("*.py"))
        if len(modules) > MAX_MODULES:
            too_big.append(f"{folder.relative_to(ROOT)}: {len(modules)} modules")
        catch_all += [str(p.relative_to(ROOT)) for p in [folder, *modules] if p.stem in CATCH_ALL]
    assert not too_big, "; ".join(too_big)
    assert not catch_all, "catch-all names: " + ", ".join(catch_all)


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
    one side first (`python -c "import llmdoctor.commands.endpoint"` failed while cli.py imported commands/probe.py
    first)."""
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


def test_no_two_modules_of_the_cli_package_share_a_name():
    """Inside llmdoctor/ each module and subpackage has a name of its own (commands/fix.py is the command,
    repair/repaired_copy.py the work), so a name in a traceback, an import or a doc points at one file."""
    names = {}
    for path in sources("llmdoctor"):
        named = path.parent if path.name == "__init__.py" else path     # a subpackage is named by its folder
        if named != ROOT / "llmdoctor" and path.name != "__main__.py":
            names.setdefault(named.stem, []).append(str(named.relative_to(ROOT)))
    assert len(names) > 30, sorted(names)
    shared = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert not shared, "; ".join(f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items()))
