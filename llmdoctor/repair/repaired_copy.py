"""`llmdoctor fix`: write a repaired COPY of a model directory; the source is only ever read.

--vocab                 resize the embedding and lm_head (and config.vocab_size) to exactly the tokenizer's
                        max id + 1: new rows cover added tokens (VOC002), surplus padding rows go (VOC003).
--untrained-embeddings  set the rows of special/added tokens that were never trained (zero, near-zero,
                        far-below-median norm, or several tokens sharing one vector) to the mean of the trained
                        rows, in the embedding and in an untied lm_head: unsloth's fix_untrained_tokens, the
                        remedy for NaN losses when fine-tuning on a chat template (unsloth#658, llama3#77).

New rows are set to the same mean (transformers' mean_resizing without the noise). Rows are judged exactly as
the EMB checks judge them (checks/vocab/special_rows.py). Mean rows are a safe starting point, not trained
vectors: the copy's EMB005 lists them as mean-initialised (no trained meaning yet) until they are fine-tuned,
and FixResult.reinitialised names them so `llmdoctor fix` can say exactly that. Tensors
that do not change are copied byte for byte, file by file; the copy is assembled in a temporary directory
beside the target and renamed into place, so a failure leaves nothing half written.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open

from checks.vocab.special_rows import UNTRAINED, classify, read_rows, row_key
from checks.shared.weights.tensor_layout import EMBED, LM_HEAD
from checks.shared.weights.tensor_scan import scan_weights
from checks.vocab.embeddings import special_token_ids
from llmdoctor.run.output_guard import is_inside
from llmdoctor.repair.safetensors_writer import write_safetensors
from reference_engine.config import load_config, model_dir_path, read_json
from reference_engine.errors import ModelDirError
from reference_engine.tokenizer.tokenizer import Tokenizer
from reference_engine.files.weights import SAFETENSORS_INDEX, Weights


class FixError(ModelDirError):
    """The fix cannot be written (bad output directory, nothing to work from)."""


@dataclass
class FixResult:
    source: Path
    out_dir: Path
    actions: list[str] = field(default_factory=list)     # one line per change, for the user
    reinitialised: dict[str, list[int]] = field(default_factory=dict)   # tensor -> ids set to the trained mean
    rewritten: list[str] = field(default_factory=list)   # files written anew (the rest are byte copies)


def fix_model(model_dir: str | Path, out_dir: str | Path, *, vocab: bool = False,
              untrained_embeddings: bool = False) -> FixResult:
    """Write the repaired copy of model_dir to out_dir and say what changed."""
    src = model_dir_path(model_dir)
    out = check_output_dir(src, Path(out_dir))
    config, tok, weights = load_config(src), Tokenizer.from_pretrained(src), Weights.open(src)
    result = FixResult(src, out)
    rows = tok.max_token_id + 1 if vocab else None
    if rows is not None and rows > 2 * len(tok) + 1024:
        raise FixError(src, f"tokenizer ids are sparse (max id {rows - 1} for {len(tok)} tokens): repair the "
                            f"tokenizer first (TOK003) instead of growing the matrices to {rows} rows")
    names = [EMBED] if config.tie_word_embeddings else [EMBED, LM_HEAD]
    replaced: dict[str, torch.Tensor] = {}
    for name in names:
        if name not in weights:
            raise FixError(src, f"tensor {name} is missing: nothing to repair from (see WGT001)")
        new = repair_matrix(weights, name, tok, rows, untrained_embeddings, result)
        if new is not None:
            replaced[name] = new
    if config.tie_word_embeddings and LM_HEAD in weights and EMBED in replaced:
        replaced[LM_HEAD] = replaced[EMBED]  # a stored copy of a tied head stays identical to the embedding
    config_changes = {"vocab_size": rows} if rows is not None and rows != config.vocab_size else {}
    if config_changes:
        result.actions.append(f"config.json vocab_size {config.vocab_size} -> {rows}")
    write_copy(src, out, weights, replaced, config_changes, result)
    return result


def expected_after_fix(finding, reinitialised: dict[str, list[int]]) -> bool:
    """Whether a finding on the copy only reports rows this fix re-initialised (EMB005: mean-initialised, not
    trained yet). Those are the fix's known limit, to be said plainly, not a failure of the fix."""
    if finding.check != "EMB005":
        return False
    rows = set(reinitialised.get(finding.evidence.get("tensor"), []))
    ids = finding.evidence.get("ids") or []
    return bool(ids) and set(ids) <= rows and finding.evidence.get("count", len(ids)) <= len(rows)


def check_output_dir(src: Path, out: Path) -> Path:
    """The resolved output path; refuses the source itself, anything inside it, and non-empty directories."""
    if is_inside(out, src):
        raise FixError(out, "the output must not be the model directory or inside it (fix never writes in place)")
    if out.exists() and not out.is_dir():
        raise FixError(out, "exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise FixError(out, "exists and is not empty")
    return out.resolve()


def repair_matrix(weights: Weights, name: str, tok, rows: int | None, untrained: bool,
                  result: FixResult) -> torch.Tensor | None:
    """The repaired [rows, hidden] matrix, or None when it needs no change."""
    info = weights.info(name)
    before, hidden = info.shape
    after = before if rows is None else rows
    keep = min(before, after)
    stats = scan_weights(weights, row_tensors=(name,), names=[name]).rows[name]
    special = [i for i in special_token_ids(tok) if i < keep]
    values = read_rows(info.file, name, special)
    fill = untrained_rows(name, stats, values) if untrained else []
    if not fill and after == before:
        return None
    mean = trained_mean(info, name, stats.row_sum, values, fill, keep, before)     # [hidden] float32
    old = weights.get(name)                                                          # [before, hidden]
    new = torch.empty((after, hidden), dtype=old.dtype)                             # [after, hidden]
    new[:keep] = old[:keep]
    new[keep:] = mean.to(old.dtype)
    for i in fill:
        new[i] = mean.to(old.dtype)
    if fill:
        labels = ", ".join(f"{i} {tok.id_to_token(i)!r}" for i in fill[:6])
        result.actions.append(f"{name}: {len(fill)} untrained special-token row(s) re-initialised to the mean of "
                              f"the trained rows ({labels}{', ...' if len(fill) > 6 else ''}); they still need "
                              "training")
    if after != before:
        what = f"{after - before} new row(s) set to the mean of the trained rows (not trained yet)" \
            if after > before else f"{before - after} row(s) past the tokenizer's last id removed"
        result.actions.append(f"{name}: rows {before} -> {after} ({what})")
    reinit = sorted(set(fill) | set(range(keep, after)))
    if reinit:
        result.reinitialised[name] = reinit
    return new


def untrained_rows(name: str, stats, values: dict[int, torch.Tensor]) -> list[int]:
    """Special rows the EMB checks call untrained: zero/near-zero/low-norm, or sharing one vector."""
    verdicts = classify(name, stats.norms, stats.amax, stats.row_sum, values)
    fill = {i for i, v in verdicts.verdicts.items() if v.kind in UNTRAINED}
    groups: dict[bytes, list[int]] = {}
    for i, row in values.items():
        if verdicts.verdicts[i].kind not in ("zero", "mean_init"):
            groups.setdefault(row_key(row), []).append(i)
    fill |= {i for ids in groups.values() if len(ids) > 1 for i in ids}
    return sorted(fill)


def trained_mean(info, name: str, row_sum: torch.Tensor, values: dict[int, torch.Tensor], fill: list[int],
                 keep: int, before: int) -> torch.Tensor:
    """Mean of the rows that stay and are not being replaced (so the copy's own mean is the same vector)."""
    total = row_sum.double().clone()                                                 # [hidden]
    if keep < before:
        total -= _sum_rows(info, name, keep, before)        # rows being trimmed away
    for i in fill:
        total -= values[i].double()
    return (total / max(1, keep - len(fill))).to(torch.float32)


def _sum_rows(info, name: str, start: int, stop: int, block: int = 4096) -> torch.Tensor:
    """Sum of rows start..stop-1 in float64, read in blocks through a safetensors slice."""
    total = torch.zeros(info.shape[1], dtype=torch.float64)
    with safe_open(str(info.file), framework="pt") as handle:
        sl = handle.get_slice(name)
        for begin in range(start, stop, block):
            total += sl[begin:min(stop, begin + block)].to(torch.float64).sum(dim=0)
    return total


def write_copy(src: Path, out: Path, weights: Weights, replaced: dict[str, torch.Tensor], config_changes: dict,
               result: FixResult) -> None:
    """Assemble the copy in a temporary sibling directory, then rename it to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        touched = {weights.info(n).file.name for n in replaced}
        delta = 0
        for item in sorted(src.iterdir()):
            target = staging / item.name
            if item.name in touched:
                delta += _rewrite_weights(item, target, weights, replaced)
                result.rewritten.append(item.name)
            elif item.name == "config.json" and config_changes:
                _write_json(target, {**read_json(item), **config_changes})
                result.rewritten.append(item.name)
            elif item.is_dir():
                shutil.copytree(item, target)
            else:
                shutil.copy2(item, target)
        if delta and (staging / SAFETENSORS_INDEX).exists():
            _update_total_size(staging / SAFETENSORS_INDEX, delta)
            result.rewritten.append(SAFETENSORS_INDEX)
        if out.exists():
            out.rmdir()  # empty (checked before any work)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _rewrite_weights(file: Path, target: Path, weights: Weights, replaced: dict[str, torch.Tensor]) -> int:
    """Write one safetensors file with some tensors replaced; returns the change in data size (bytes)."""
    names = [n for n in weights.names if weights.info(n).file.name == file.name]
    entries = [(n, replaced.get(n, weights.info(n))) for n in names]
    before = sum(weights.info(n).nbytes for n in names)
    after = write_safetensors(target, entries, weights.headers[weights.info(names[0]).file].metadata)
    return after - before


def _update_total_size(index: Path, delta: int) -> None:
    data = read_json(index)
    meta = data.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("total_size"), int):
        meta["total_size"] += delta
        _write_json(index, data)


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
