"""The check catalogue: `@check` records a function's metadata in REGISTRY at import time.

    @check("VOC001", category="vocab", severity="error", needs=("tokenizer", "weights"), hint="One line fix.")
    def token_ids_beyond_embedding(ctx):
        '''Summary line (shown by `llmdoctor checks`).

        Body: what `llmdoctor explain VOC001` prints.'''
        yield Problem("one-line message", evidence={"tokenizer_len": 32004, "embedding_rows": 32000})

A check whose engine runs other checks share declares them: `@check(..., shares=(FORWARD,))` names the
SharedRun values it reads (defined beside the code that makes their inputs); the runner makes each chosen run
once, riding on the greedy traces' passes when the engine streams (checks/shared/passes.py).

A check yields (or returns a list of) Problem; yielding nothing means it passed. It raises Skip("reason")
when it does not apply. Mistakes in a declaration (bad id, unknown category, an id used twice) raise
RegistryError when the module is imported, so they cannot reach a user.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Callable

from findings import CATEGORIES, Location, Severity

ID_PATTERN = re.compile(r"^[A-Z]{3}\d{3}$")
NEEDS = ("files", "config", "tokenizer", "weights", "engine", "gpu", "gguf",
         "adapter",  # adapter: a LoRA adapter run on its base (`check ADAPTER_DIR --base BASE`; checks/adapter/)
         "pair",  # pair: two models, `llmdoctor diff` only (checks/diff/pair.py)
         "servers",  # servers: two live servers, `llmdoctor diff URL_A URL_B` only (checks/diff/servers/)
         "endpoint",  # endpoint: a live server, `probe endpoint` / `triage --endpoint` only (checks/endpoint/)
         "load")  # load: a loaded server measured, `probe load` / `triage --load` only (checks/endpoint/load/)
# id family prefix -> the category it belongs to (a family never changes category); None: a family that spans
# categories, each check in the category of what it checks (GGF: GGUF-format checks; DRF: drift, any engine category)
FAMILIES = {"FIL": "files", "CFG": "config", "WGT": "weights", "VOC": "vocab", "EMB": "embeddings",
            "TOK": "tokenizer", "GLD": "golden", "ACT": "activations", "KVC": "kv_cache", "NUM": "numerics",
            "GEN": "generation", "DRF": None, "GPU": "gpu", "ENV": "environment",
            "ENG": "selftest", "GGF": None, "MOE": None, "CNV": None, "DIF": "diff", "EPT": "endpoint",
            "QNT": "quantization", "LRA": "adapter",
            "CMP": "competence", "CTX": "context"}
# Ids are never reused. A check that moved keeps resolving under its old id (--select/--ignore, explain):
# retired id -> (the id that replaced it, why it moved)
RETIRED = {
    "KVC001": ("ENG001", "paged decode vs full recompute is a self-test of llmdoctor's reference engine"),
    "KVC002": ("ENG002", "padded batch vs each sequence alone is a self-test of llmdoctor's reference engine"),
    "ACT004": ("ENG003", "the attention mask covering the padding is a self-test of llmdoctor's tokenizer"),
}


class RegistryError(Exception):
    """A check declaration is wrong (programmer error, raised at import)."""


class SeverityError(RuntimeError):
    """A check emitted a finding above its declared severity: a bug in the check (the declaration is what
    `llmdoctor checks` shows and what --fail-on users plan with). The runner reports the check as crashed."""


def over_declaration(spec: "CheckSpec", severity: Severity) -> SeverityError | None:
    """The error to raise when `severity` is above what `spec` declares, else None."""
    if severity.rank <= spec.severity.rank:
        return None
    return SeverityError(f"{spec.id} emitted a {severity.value} finding but declares at most "
                         f"{spec.severity.value}: a bug in the check's declaration")


class Skip(Exception):
    """Raised by a check that does not apply to this model; the run records it as skipped with the reason."""


class CannotRun(Skip):
    """Raised by a check that applies but cannot be run here (an input it needs cannot be made: no --baseline, no
    prompt this tokenizer can build). Skipped like Skip when nothing asked for the check; an error finding when
    the run asked for it (named by its id, or reading an option given: llmdoctor/run/honoured.py)."""


@dataclass
class Problem:
    """What a check yields; severity and hint default to the check's declaration."""
    message: str
    evidence: dict | None = None
    severity: str | Severity | None = None
    hint: str | None = None
    data: dict | None = None
    location: Location | None = None   # file (relative to the model root) and logical name; line resolved later


@dataclass(frozen=True, eq=False)
class SharedRun:
    """An engine run several checks share. `describe(ctx)` returns its passes.Part (the throwaway prefills and
    scripts it needs, and where their results go; None: nothing to run on this model). `traces(ctx, prefill,
    decode)` marks the greedy traces themselves, whose passes the other runs ride on: it runs them with the
    passes' own prefill and decode steps. Compared by identity: one value per run."""
    name: str
    describe: Callable | None = None
    traces: Callable | None = None

    @property
    def greedy(self) -> bool:
        return self.traces is not None


@dataclass(frozen=True)
class CheckSpec:
    id: str
    category: str
    severity: Severity
    needs: tuple[str, ...]
    hint: str
    summary: str               # first docstring line
    doc: str                   # the rest of the docstring, dedented
    func: Callable
    module: str
    shares: tuple[SharedRun, ...] = ()     # the shared engine runs it reads (checks/shared/passes.py)

    @property
    def family(self) -> str:
        return self.id[:3]


REGISTRY: dict[str, CheckSpec] = {}


def check(id: str, *, category: str, severity: str = "error", needs: tuple[str, ...] | list[str] = (),
          hint: str = "", shares: tuple[SharedRun, ...] = ()) -> Callable[[Callable], Callable]:
    """Declare a check; see the module docstring."""
    def register(func: Callable) -> Callable:
        spec = make_spec(func, id, category, severity, tuple(needs), hint, tuple(shares))
        existing = REGISTRY.get(id)
        if existing is not None and not _same_function(existing.func, func):
            raise RegistryError(f"check id {id} declared twice: {existing.module}.{existing.func.__name__} "
                                f"and {spec.module}.{func.__name__}")
        REGISTRY[id] = spec
        func.check_spec = spec
        return func
    return register


def make_spec(func: Callable, id: str, category: str, severity: str, needs: tuple[str, ...],
              hint: str, shares: tuple[SharedRun, ...] = ()) -> CheckSpec:
    where = f"{func.__module__}.{func.__name__}"
    if not ID_PATTERN.match(id):
        raise RegistryError(f"{where}: check id {id!r} is not a family prefix + 3 digits (e.g. VOC001)")
    if id in RETIRED:
        raise RegistryError(f"{where}: {id} is retired (now {RETIRED[id][0]}); ids are never reused")
    if category not in CATEGORIES:
        raise RegistryError(f"{where}: unknown category {category!r} (expected one of: {', '.join(CATEGORIES)})")
    family_category = FAMILIES.get(id[:3], "unknown")
    if family_category == "unknown":
        raise RegistryError(f"{where}: unknown id family {id[:3]!r} (known: {', '.join(FAMILIES)})")
    if family_category is not None and family_category != category:
        raise RegistryError(f"{where}: {id} is in family {id[:3]} ({family_category}), not {category!r}")
    try:
        sev = Severity.parse(severity)
    except ValueError as e:
        raise RegistryError(f"{where}: {e}") from None
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise RegistryError(f"{where}: unknown needs {unknown} (expected any of: {', '.join(NEEDS)})")
    if any(not isinstance(run, SharedRun) for run in shares):
        raise RegistryError(f"{where}: shares= takes SharedRun values, got {shares!r}")
    if shares and "engine" not in needs:
        raise RegistryError(f"{where}: a check that shares engine runs needs 'engine'")
    summary, doc = split_docstring(func)
    if not summary:
        raise RegistryError(f"{where}: a check needs a docstring (first line = summary)")
    return CheckSpec(id, category, sev, needs, hint, summary, doc, func, func.__module__, shares)


def split_docstring(func: Callable) -> tuple[str, str]:
    text = inspect.getdoc(func) or ""
    first, _, rest = text.partition("\n")
    return first.strip(), rest.strip()


def _same_function(a: Callable, b: Callable) -> bool:
    # re-importing or reloading a module re-runs its decorators: that is not a duplicate id
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def specs() -> list[CheckSpec]:
    """Every registered check, in catalogue order (category order, then id)."""
    order = {c: i for i, c in enumerate(CATEGORIES)}
    return sorted(REGISTRY.values(), key=lambda s: (order[s.category], s.id))
