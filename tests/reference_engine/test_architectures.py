"""A family's facts live in one module (reference_engine/architectures/<kind>/<family>.py): its architecture
names are written there and nowhere else in the engine, it is registered by one line (architectures.REGISTRY)
that gives the data and the engine registries the same families, and a value several readers need (Falcon-H1's
defaults and multipliers) is read one way by all of them."""
from __future__ import annotations

import ast
import functools
import math
from pathlib import Path

import pytest

from reference_engine.architectures import FAMILIES, GGUF_ARCHS, REGISTRY
from reference_engine.architectures.hybrid import falcon_h1
from reference_engine.config import parse_config
from reference_engine.core import families
from reference_engine.errors import ModelDirError

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("reference_engine", "checks", "probes", "llmdoctor")


@functools.cache
def read(path: Path) -> tuple[frozenset, frozenset]:
    """(string literals, imported names) of a module, parsed once per run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    literals, imports = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            literals.add(n.value)
        elif isinstance(n, ast.ImportFrom) and n.module:
            imports.add(n.module)
            imports.update(f"{n.module}.{a.name}" for a in n.names)
        elif isinstance(n, ast.Import):
            imports.update(a.name for a in n.names)
    return frozenset(literals), frozenset(imports)


@functools.cache
def production_files() -> tuple[Path, ...]:
    """The toolkit's modules, without the engine's test tools (testing/ builds configs by name)."""
    return tuple(path for package in PRODUCTION for path in sorted((ROOT / package).rglob("*.py"))
                 if "testing" not in path.relative_to(ROOT).parts[:2])


def files_knowing(family) -> list[str]:
    """The production files that name one of the family's architectures or its registry line, or import its data
    or engine module."""
    modules = {m for m in imported_names() if m.endswith(f".{family.name}") or m.endswith(f".{family.name}.DATA")}
    names = set(family.architectures) | {path for path in REGISTRY if path.endswith(f".{family.name}")}
    return [str(path.relative_to(ROOT)) for path in production_files()
            if read(path)[0] & names or read(path)[1] & modules]


def imported_names() -> set[str]:
    kinds = [p.parent.name for p in (ROOT / "reference_engine/architectures").glob("*/__init__.py")]
    return {f"reference_engine.{where}.{kind}.{fam.name}" for where in ("architectures", "core.families")
            for kind in kinds for fam in FAMILIES}


def test_each_architecture_is_named_only_in_its_data_module():
    """No engine module outside architectures/ spells an architecture (testing/ builds configs, so it may)."""
    names = {a for fam in FAMILIES for a in fam.architectures}
    bad = []
    for path in production_files():
        rel = path.relative_to(ROOT).parts
        if rel[0] != "reference_engine" or rel[1] == "architectures":
            continue
        bad += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(read(path)[0] & names)]
    assert not bad, "\n".join(bad)
    for fam in FAMILIES:            # where each family is known today (docs/families.md "Adding a family")
        known = files_knowing(fam)
        print(f"{fam.name}: {len(known)} production files: {', '.join(known)}")


def test_a_plain_family_is_known_by_three_files():
    """Phi-3 reuses the shared mixers and Settings and has no checks of its own: its data module, its engine
    module and its line in the registry are all the production code that knows it."""
    assert files_knowing(next(f for f in FAMILIES if f.name == "phi3")) == [
        "reference_engine/architectures/__init__.py", "reference_engine/architectures/dense/phi3.py",
        "reference_engine/core/families/dense/phi3.py"]


def test_one_registry_line_gives_both_registries_the_same_families():
    assert len(REGISTRY) == len(set(REGISTRY)) == len(FAMILIES)
    assert [path.rsplit(".", 1)[1] for path in REGISTRY] == [f.name for f in FAMILIES]
    assert [(f.name, f.architectures) for f in FAMILIES] == \
        [(f.name, f.architectures) for f in families.FAMILIES]
    assert {arch.architecture for arch in GGUF_ARCHS.values()} <= set(families.SUPPORTED_ARCHITECTURES)


def falcon_config(**fields) -> dict:
    return {"architectures": [falcon_h1.FALCON_H1], "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 128, **fields}


def test_falcon_h1_defaults_and_multipliers_read_one_way():
    """The engine and the GGUF folds read the same defaults (1024 / 256 / 128) and the same multipliers; a bad
    multiplier is a one-line error for the engine and no fold claimed for the diff (its config check reports it)."""
    raw = falcon_config(key_multiplier=2.0, attention_in_multiplier=3.0)
    config = parse_config(raw)
    dims = families.settings(config).mamba
    assert (dims.inner, dims.d_state, dims.heads) == (1024, 256, 128)
    rows = falcon_h1.folds(raw, "model.layers.0.mamba.in_proj.weight")
    assert rows.shape == (dims.inner + dims.conv_dim + dims.heads, 1)
    assert falcon_h1.folds(raw, "model.layers.0.self_attn.k_proj.weight") == 6.0
    assert families.settings(config).attention.scale == pytest.approx(2.0 / math.sqrt(16))
    bad = falcon_config(key_multiplier="x")
    with pytest.raises(ModelDirError, match="'key_multiplier' must be a finite number"):
        families.settings(parse_config(bad))
    assert falcon_h1.folds(bad, "model.layers.0.self_attn.k_proj.weight") is None
