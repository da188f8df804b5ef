"""Where each finding is, and its identity across runs, filled in after a run.

A check names the file of the model and the logical thing (`Location(file="config.json", logical="vocab_size")`);
this module turns that into what a CI platform can show inline: the path as the user gave the model path, the
1-based line of the key (llmdoctor/reporting/json_lines.py), the template line, or the tensor's line in the safetensors
index. A tensor the index does not list (a model with no index: one model.safetensors, an adapter's
adapter_model.safetensors) points at the safetensors file that holds it, with no line (a binary file has none
to show) and the tensor's name as the logical name; a GGUF model's findings point at the GGUF file the same way.
Other findings about a binary file are anchored to the text file that declares it (config.json line 1), the
file kept in the logical name. A finding that names no file is anchored to config.json line 1, except one about
what a request sent to a server carried (logical name "request.<field>", no file): no file of the model holds
it, so it keeps no file and no line.

The fingerprint is sha256 over (check, file inside the model, logical name, message without numbers or the
model's path): the same finding on the same model gets the same fingerprint on every run and every machine.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

from findings import Finding, Location, Report
from llmdoctor.reporting.json_lines import find_key_line

CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"
INDEX = "model.safetensors.index.json"
# where a finding that names nothing is anchored (when the file exists), else config.json
CATEGORY_FILES = {"tokenizer": "tokenizer.json", "generation": "generation_config.json"}
BINARY_SUFFIXES = (".safetensors", ".gguf", ".bin", ".model", ".pt", ".pth", ".pkl", ".npz", ".onnx")
# words that vary between runs of the same model: hex digests/addresses, then any number
HEX_WORD = re.compile(r"\b(?:0[xX][0-9a-fA-F]+|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{6,})\b")
NUMBER = re.compile(r"\d+(?:[.,_]\d+)*(?:[eE][-+]?\d+)?")


class KnownReportError(ValueError):
    """--known names a file that is not a JSON report of llmdoctor."""


def locate_report(report: Report, model: str | Path | None, shown: str | None = None) -> None:
    """Give every finding of `report` a resolved location and a fingerprint, in place (findings that have a
    fingerprint already, from a report merged into this one, are left as they are). `model` is the model
    directory or GGUF file the findings are about (None: a run without a model, e.g. `probe kv`); `shown` is
    that path as the user gave it (default: `model` itself)."""
    anchor = Anchor(Path(model), shown) if model is not None else None
    fresh = [i for i, f in enumerate(report.findings) if f.fingerprint is None]   # merged reports are done
    located = with_fingerprints([locate(report.findings[i], anchor) for i in fresh], anchor)
    for i, finding in zip(fresh, located):
        report.findings[i] = finding


class Anchor:
    """A model path: its directory, the file a GGUF model is, and the prefix findings are shown under."""

    def __init__(self, model: Path, shown: str | None):
        self.single_file = model.is_file()
        self.root = model.parent if self.single_file else model
        given = Path(shown if shown is not None else str(model))
        self.prefix = given.parent if self.single_file else given
        self.default = model.name if self.single_file else CONFIG
        if not self.single_file and not (model / CONFIG).is_file() and (model / ADAPTER_CONFIG).is_file():
            self.default = ADAPTER_CONFIG   # a LoRA adapter directory: its config declares the adapter tensors
        spellings = (str(model), str(given), str(model.resolve()), model.as_posix())
        self.secrets = {s for s in spellings if s not in ("", ".")}   # the model's path, as messages may write it

    def shown(self, rel: str) -> str:
        return (self.prefix / rel).as_posix()

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()


def from_evidence(finding: Finding) -> Location:
    """A check that named no location: the tensor, metadata key, layer or file its evidence names, else the
    category's usual file (config.json by default)."""
    ev = finding.evidence
    tensor, file, key, layer = ev.get("tensor"), ev.get("file"), ev.get("key"), ev.get("layer")
    if isinstance(tensor, str):
        return Location(file="model.safetensors", logical=tensor)
    file = file if isinstance(file, str) and "/" not in file.strip("/") else None
    if isinstance(key, str):
        return Location(file=file, logical=key)
    if isinstance(layer, int) and not isinstance(layer, bool):
        module, expert = ev.get("module"), ev.get("expert")
        logical = f"model.layers.{layer}" + (f".{module}" if isinstance(module, str) else "") \
            + (f".mlp.experts.{expert}" if isinstance(expert, int) else "")
        return Location(file=file, logical=logical)
    return Location(file=file or CATEGORY_FILES.get(finding.category))


REQUEST = "request."      # a logical name about a request's field (checks/endpoint), not about a model file


def locate(finding: Finding, anchor: Anchor | None) -> Finding:
    loc = finding.location or from_evidence(finding)
    if loc.file is None and (loc.logical or "").startswith(REQUEST):
        return replace(finding, location=Location(None, None, loc.logical),
                       fingerprint=_relative_key(None, loc.logical))
    if anchor is None:
        return replace(finding, location=loc if finding.location else None)
    rel, line = resolve(loc, anchor)
    named = (loc.file or "").replace("\\", "/").lstrip("/")
    # a finding moved off the file it names (binary, missing) keeps that file in its logical name
    logical = loc.logical or (named if named and named != rel else None)
    # the file inside the model is kept for the fingerprint (the shown prefix may be absolute)
    return replace(finding, location=Location(anchor.shown(rel) if rel else None, line, logical),
                   fingerprint=_relative_key(rel, logical))


def resolve(loc: Location, anchor: Anchor) -> tuple[str | None, int | None]:
    """(file inside the model, line) for a check's location."""
    rel = (loc.file or anchor.default).replace("\\", "/").lstrip("/")
    if anchor.single_file and rel.lower().endswith(BINARY_SUFFIXES):
        rel = anchor.default       # a GGUF model: its tensors are in the file itself
    if rel.lower().endswith(BINARY_SUFFIXES) and not (anchor.single_file and rel == anchor.default):
        if loc.logical and anchor.exists(INDEX):
            line = find_key_line(anchor.root / INDEX, loc.logical)
            if line is not None:
                return INDEX, line
        if loc.logical and rel.lower().endswith(".safetensors") and anchor.exists(rel):
            return rel, None       # the tensor's own file: no line in a binary file, its name is the logical one
        if anchor.exists(anchor.default):
            return anchor.default, 1
    elif not anchor.exists(rel):   # a missing file cannot be shown: the model's config (or GGUF file) stands in
        rel = CONFIG if anchor.exists(CONFIG) else anchor.default
    if rel.lower().endswith(BINARY_SUFFIXES) or not anchor.exists(rel):
        return rel, None
    if loc.line is not None:
        return rel, loc.line
    if rel.endswith(".json") and loc.logical and (loc.file or CONFIG) == rel:
        return rel, find_key_line(anchor.root / rel, loc.logical) or 1
    return rel, 1


def _relative_key(rel: str | None, logical: str | None) -> str:
    return f"{rel or ''}\0{logical or ''}"


def with_fingerprints(located: list[Finding], anchor: Anchor | None) -> list[Finding]:
    """Fingerprints from (check, file, logical, message without numbers); the n-th repeat of the same
    fingerprint in a report gets its own (`#n`), so each finding stays distinct and the order keeps them stable."""
    seen: dict[str, int] = {}
    out = []
    for finding in located:
        where = finding.fingerprint if finding.fingerprint is not None else _relative_key(
            None, finding.location.logical if finding.location else None)
        base = "\0".join((finding.check, where, normalize_message(finding.message, anchor)))
        count = seen.get(base, 0)
        seen[base] = count + 1
        digest = hashlib.sha256((base + (f"\0#{count}" if count else "")).encode()).hexdigest()
        out.append(replace(finding, fingerprint=digest[:32]))
    return out


def normalize_message(message: str, anchor: Anchor | None = None) -> str:
    """The message with the model's path, hex digests and numbers taken out."""
    for path in sorted(anchor.secrets if anchor else (), key=len, reverse=True):
        # whole path words only: a model directory named "m" must not eat the m of "embedding"
        message = re.sub(rf"(?<![\w.\-/]){re.escape(path)}(?![\w\-])", "<model>", message)
    return NUMBER.sub("#", HEX_WORD.sub("#", message))


def load_known(path: str | Path) -> set[str]:
    """The fingerprints of the findings in a JSON report of an earlier run."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise KnownReportError(f"{path}: cannot read the --known report: {e.strerror or e}") from None
    except ValueError as e:
        raise KnownReportError(f"{path}: the --known report is not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("tool") != "llmdoctor" or not isinstance(data.get("findings"), list):
        raise KnownReportError(f"{path}: not a JSON report of llmdoctor (write one with --format json)")
    return {f["fingerprint"] for f in data["findings"] if isinstance(f, dict) and isinstance(f.get("fingerprint"), str)}


def mark_known(report: Report, known_path: str | Path | None) -> None:
    """Mark the findings whose fingerprint the --known report holds; they are reported but never fail."""
    if known_path is None:
        return
    known = load_known(known_path)
    report.known_report = str(known_path)
    report.findings = [replace(f, known=f.fingerprint in known) for f in report.findings]
