"""The @check decorator: metadata recorded, declaration mistakes refused at import, discovery automatic."""
from __future__ import annotations

import pkgutil

import pytest

import checks
from checks.catalogue.registry import REGISTRY, NEEDS, Problem, RegistryError, check, specs
from findings import CATEGORIES, Severity


def test_decorator_records_metadata_and_docstring(sandbox):
    @check("ENV901", category="environment", severity="warning", needs=("config", "gpu"), hint="Do this.")
    def sample(ctx):
        """One-line summary.

        What it catches and why; modelled on example#1."""
        yield Problem("x")

    spec = REGISTRY["ENV901"]
    assert (spec.id, spec.category, spec.severity, spec.needs, spec.hint) == \
        ("ENV901", "environment", Severity.WARNING, ("config", "gpu"), "Do this.")
    assert spec.summary == "One-line summary."
    assert spec.doc == "What it catches and why; modelled on example#1."
    assert spec.func is sample and sample.check_spec is spec


@pytest.mark.parametrize("kwargs, message", [
    ({"id": "VOC9", "category": "vocab"}, "3 digits"),
    ({"id": "voc901", "category": "vocab"}, "3 digits"),
    ({"id": "VOC901", "category": "vocabulary"}, "unknown category"),
    ({"id": "VOC901", "category": "tokenizer"}, r"family VOC \(vocab\)"),
    ({"id": "XYZ901", "category": "vocab"}, "unknown id family"),
    ({"id": "VOC901", "category": "vocab", "severity": "fatal"}, "unknown severity"),
    ({"id": "VOC901", "category": "vocab", "needs": ("tokeniser",)}, "unknown needs"),
])
def test_bad_declarations_are_refused(sandbox, kwargs, message):
    kwargs = dict(kwargs)
    ident = kwargs.pop("id")
    with pytest.raises(RegistryError, match=message):
        @check(ident, **kwargs)
        def bad(ctx):
            """Summary."""
    assert ident not in REGISTRY


def test_missing_docstring_is_refused(sandbox):
    with pytest.raises(RegistryError, match="docstring"):
        @check("ENV902", category="environment")
        def undocumented(ctx):
            pass


def test_duplicate_id_is_refused_but_reimport_is_not(sandbox):
    def make():
        @check("ENV903", category="environment")
        def first(ctx):
            """Summary."""
        return first
    make()
    make()  # same module and qualified name: a reload, not a clash
    with pytest.raises(RegistryError, match="declared twice"):
        @check("ENV903", category="environment")
        def other(ctx):
            """Summary."""


def test_drift_family_may_use_any_engine_category(sandbox):
    @check("DRF901", category="golden")
    def drift(ctx):
        """Summary."""
    assert REGISTRY["DRF901"].category == "golden"


def test_every_check_module_is_discovered_and_catalogue_is_well_formed():
    loaded = checks.load_all()
    # every family package (and any module beside them) registers checks; checks/shared/ is what families share
    modules = {m.name for m in pkgutil.iter_modules(checks.__path__)} - {checks.MACHINERY, "shared"}
    public = {f"checks.{m}" for m in modules if not m.startswith("_")}
    assert not checks.load_errors(), [e.message for e in checks.load_errors()]
    registering = {s.module for s in loaded}   # a check package (checks/endpoint/) registers from its submodules
    silent = [m for m in public if not any(r == m or r.startswith(m + ".") for r in registering)]
    assert not silent, f"a check module registered no check: {silent}"
    assert [s.id for s in loaded] == [s.id for s in specs()]
    order = [CATEGORIES.index(s.category) for s in loaded]
    assert order == sorted(order)
    for spec in loaded:
        assert spec.summary and spec.doc, f"{spec.id} needs a summary line and an explain body"
        assert spec.hint, f"{spec.id} needs a hint"
        assert set(spec.needs) <= set(NEEDS)
