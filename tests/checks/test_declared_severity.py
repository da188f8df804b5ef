"""A check's declared severity is the highest it can emit (`llmdoctor checks` and --fail-on users rely on it).

Two guards: every check's source (and the module-level helpers it calls) is scanned for `severity=` values
above its declaration, and the runner reports a check that emits one anyway as crashed, keeping the finding."""
from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path


import checks
from checks.catalogue.registry import REGISTRY, Problem, check
from checks.catalogue.inputs import CheckInputs
from findings import Severity
from llmdoctor.run.runner import run_one

LEVELS = {s.value: s.rank for s in Severity}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _literals(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in LEVELS}


def _called(node: ast.AST, functions: dict) -> set[str]:
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in functions}


def _returned(func: ast.FunctionDef) -> set[str]:
    return set().union(*(_literals(n.value) for n in ast.walk(func) if isinstance(n, ast.Return) and n.value))


def _assigned(func: ast.FunctionDef, name: str, functions: dict) -> set[str]:
    """Severity strings a local `name` can hold: literals assigned to it, or returned by a helper assigned."""
    out: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(name in {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
                                                for target in node.targets):
            out |= _literals(node.value)
            out |= set().union(*(_returned(functions[f]) for f in _called(node.value, functions)))
    return out


def emitted_severities(func_name: str, tree: ast.Module) -> set[str]:
    """Every severity string that `severity=` in the function, or a module helper it calls, can pass."""
    functions = _functions(tree)
    seen, todo, found = set(), [func_name], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        func = functions[name]
        for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            for kw in call.keywords:
                if kw.arg != "severity":
                    continue
                found |= _literals(kw.value)
                for var in (n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)):
                    found |= _assigned(func, var, functions)
        todo += sorted(_called(func, functions) - seen)
    return found


def _module_tree(module: str) -> ast.Module:
    return ast.parse(Path(inspect.getsourcefile(__import__(module, fromlist=["_"]))).read_text(encoding="utf-8"))


def test_no_check_can_emit_above_its_declared_severity():
    specs = checks.load_all()
    trees = {m: _module_tree(m) for m in {s.module for s in specs}}
    over = {}
    for spec in specs:
        levels = emitted_severities(spec.func.__name__, trees[spec.module])
        above = sorted(level for level in levels if LEVELS[level] > spec.severity.rank)
        if above:
            over[spec.id] = (spec.severity.value, above)
    assert over == {}


def test_the_scan_sees_literals_variables_and_helpers():
    """The scanner is not vacuous: it finds what the catalogue's escalating checks really emit."""
    def levels(check_id):
        spec = REGISTRY[check_id]
        return emitted_severities(spec.func.__name__, _module_tree(spec.module))
    checks.load_all()
    assert levels("KVC003") == {"warning", "error"}          # a literal per part
    assert levels("NUM001") >= {"warning", "error", "info"}  # a variable set by an if/else
    unpacked = textwrap.dedent('''
        def helper():
            return "info", {}
        def check(ctx):
            severity, evidence = helper()                      # a helper's return value, unpacked
            yield Problem("x", severity=severity)
    ''')
    assert emitted_severities("check", ast.parse(unpacked)) == {"info"}
    assert levels("GLD001") >= {"warning"}                   # a module helper that builds Problems
    source = textwrap.dedent('''
        def helper():
            return Problem("x", severity="error")
        def bad(ctx):
            level = "info"
            yield helper()
            yield Problem("y", severity=level)
    ''')
    assert emitted_severities("bad", ast.parse(source)) == {"error", "info"}


def test_declarations_the_issue_named_are_fixed():
    checks.load_all()
    assert {i: REGISTRY[i].severity.value for i in ("KVC003", "WGT004", "NUM001")} == dict.fromkeys(
        ("KVC003", "WGT004", "NUM001"), "error")


def test_runner_reports_a_check_that_emits_above_its_declaration(sandbox, factory_model_dir):
    @check("ENV931", category="environment", severity="warning")
    def escalates(ctx):
        """Declares warning, emits error (a bug in the declaration)."""
        yield Problem("fine", severity="info")
        yield Problem("too severe", severity="error")
        yield Problem("never reached")

    run, findings = run_one(REGISTRY["ENV931"], CheckInputs(factory_model_dir("llama")))
    assert run.status == "crashed" and "declares at most warning" in run.reason
    assert [f.message for f in findings[:2]] == ["fine", "too severe"]     # the real finding is kept as emitted
    assert findings[1].severity.value == "error"
    crash = findings[-1]
    assert crash.severity.value == "error" and "SeverityError" in crash.message and "ENV931" in crash.message
