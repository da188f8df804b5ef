"""File checks (FIL): the model directory has the files a model needs, they parse, the safetensors files are
intact and the shard index agrees with them. Nothing here loads a tensor or unpickles anything."""
from __future__ import annotations

from pathlib import Path

from checks.catalogue.registry import Problem, check
from findings import Location
from reference_engine.config import read_json
from reference_engine.errors import ModelDirError
from reference_engine.files.safetensors_io import read_header, validate_file
from reference_engine.files.weights import find_pickle_files, safe_weight_path

INDEX = "model.safetensors.index.json"
SIDE_JSON = ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")


@check("FIL001", category="files", severity="error", needs=("files",),
       hint="Copy the missing or broken file from the original checkpoint (config.json, tokenizer.json, "
            "*.safetensors).")
def required_files(ctx):
    """The directory has config.json, safetensors weights and tokenizer.json, and its JSON files parse.

    A model directory needs config.json (architecture and sizes), weights, and the tokenizer files.
    A missing tokenizer.json is a warning, or a note when a SentencePiece tokenizer.model is there (the
    reference tokenizer reads it, and transformers converts it at load time); a JSON side file that exists
    but does not parse (generation_config.json, tokenizer_config.json, special_tokens_map.json) is an error
    because transformers and vLLM refuse it.

    Remedy: re-download or copy the named file from the original checkpoint.
    """
    root = ctx.model_dir
    if not (root / "config.json").is_file():
        yield Problem("config.json is missing", evidence={"file": "config.json"})
    if not any(root.glob("*.safetensors")) and not (root / INDEX).is_file():
        yield Problem("no safetensors weights (model.safetensors or an index)", evidence={"dir": str(root)})
    if not (root / "tokenizer.json").is_file() and (root / "tokenizer.model").is_file():
        yield Problem("tokenizer.json is missing: the tokenizer is read from tokenizer.model", severity="info",
                      evidence={"file": "tokenizer.json"})
    elif not (root / "tokenizer.json").is_file():
        yield Problem("tokenizer.json is missing: tokenizer checks cannot run", severity="warning",
                      evidence={"file": "tokenizer.json"})
    for name in SIDE_JSON:
        if (root / name).exists():
            try:
                read_json(root / name)
            except ModelDirError as e:
                yield Problem(f"{name} does not parse: {e.problem}", evidence={"file": name})


@check("FIL002", category="files", severity="error", needs=("files",),
       hint="The file is damaged (truncated download or a broken writer): download it again and compare its "
            "sha256 with the hub's.")
def safetensors_intact(ctx):
    """Every safetensors file has a valid header whose tensors tile the data buffer exactly.

    The safetensors format fixes the rules: an 8-byte header length, a UTF-8 JSON header under 100 MB,
    tensors that tile the buffer contiguously from offset 0 without overlap or gaps, byte ranges that
    match dtype x shape, and a file exactly as long as the header says. A truncated download or a
    writer bug breaks one of these; loaders then fail with an opaque error or, worse, read overlapping
    bytes as two tensors. The header is parsed by our own validator (no tensor is loaded).

    Remedy: re-download the file and compare sizes/sha256 with the source.
    """
    for path in sorted(ctx.model_dir.glob("*.safetensors")):
        for problem in validate_file(path):
            yield Problem(f"{path.name}: {problem}", evidence={"file": path.name})


@check("FIL003", category="files", severity="error", needs=("files",),
       hint="Regenerate model.safetensors.index.json from the shards (every tensor once, plain file names "
            "inside the model directory).")
def shard_index_consistent(ctx):
    """The shard index names existing shards inside the directory and matches their contents tensor for tensor.

    Sharded checkpoints list `tensor name -> shard file` in model.safetensors.index.json. Loaders trust
    it: a tensor listed in the wrong shard fails at load time, a tensor present in a shard but not in the
    index is silently dropped (then randomly initialised by transformers, "Some weights were not
    initialized"), a missing shard fails only after the earlier shards are loaded. A shard path such as
    `../x.safetensors` or an absolute path makes the loader read a file outside the model directory.

    Remedy: rebuild the index from the shard headers.
    """
    root = ctx.model_dir
    if not (root / INDEX).exists():
        return
    try:
        weight_map = read_json(root / INDEX).get("weight_map")
    except ModelDirError as e:
        yield Problem(f"{INDEX} does not parse: {e.problem}", evidence={"file": INDEX})
        return
    if not isinstance(weight_map, dict) or not weight_map:
        yield Problem(f"{INDEX} has no 'weight_map' object", evidence={"file": INDEX})
        return
    yield from _index_vs_shards(root, weight_map)


def _index_vs_shards(root: Path, weight_map: dict):
    by_shard: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        by_shard.setdefault(str(shard), set()).add(tensor)
    for shard, listed in sorted(by_shard.items()):
        try:
            path = safe_weight_path(root, shard, root / INDEX)  # refuses '..', absolute, escaping symlinks
        except ModelDirError as e:
            yield Problem(f"index: {e.problem}", evidence={"shard": shard, "tensors": len(listed)},
                          location=Location(file=INDEX, logical=min(listed) if listed else "weight_map"))
            continue
        try:
            stored = set(read_header(path).tensors)
        except ModelDirError as e:
            yield Problem(f"shard {shard} unreadable: {e.problem}", evidence={"shard": shard},
                          location=Location(file=INDEX, logical=min(listed) if listed else "weight_map"))
            continue
        yield from _listed_vs_stored(shard, listed, stored, weight_map)
    for orphan in sorted(p.name for p in root.glob("*.safetensors") if p.name not in by_shard):
        yield Problem(f"{orphan} is not named by the index: its tensors are ignored by loaders",
                      severity="warning", evidence={"shard": orphan},
                      location=Location(file=INDEX, logical="weight_map"))


def _listed_vs_stored(shard: str, listed: set[str], stored: set[str], weight_map: dict):
    absent = sorted(listed - stored)
    unlisted = sorted(t for t in stored - listed if weight_map.get(t) != shard)
    if absent:
        yield Problem(f"index places {len(absent)} tensor(s) in {shard} that it does not hold, e.g. {absent[0]}",
                      evidence={"shard": shard, "missing": absent[:10]},
                      location=Location(file=INDEX, logical=absent[0]))
    if unlisted:
        yield Problem(f"{shard} holds {len(unlisted)} tensor(s) the index does not map to it, e.g. {unlisted[0]}",
                      evidence={"shard": shard, "unlisted": unlisted[:10]})


@check("FIL004", category="files", severity="error", needs=("files",),
       hint="Convert the checkpoint to safetensors in a sandbox you trust (or get the safetensors release), "
            "then delete the pickle files.")
def pickle_weights(ctx):
    """No pickle weight files (*.bin, *.pt, *.pth, *.ckpt, *.pkl); pickle-only weights are an error.

    PyTorch pickle checkpoints execute code when loaded (`torch.load` without weights_only, and
    weights_only has had bypasses); scanners such as picklescan and modelscan have been bypassed too, so
    this tool never opens them. Alongside safetensors they are ignored (warning: other tools may prefer
    them); when they are the only weights the model cannot be checked safely (error).

    Remedy: use the safetensors release of the model, or convert in an isolated sandbox.
    """
    pickles = sorted(Path(p).name for p in find_pickle_files(ctx.model_dir))
    if not pickles:
        return
    has_safetensors = any(ctx.model_dir.glob("*.safetensors"))
    ev = {"files": pickles[:20], "count": len(pickles)}
    if has_safetensors:
        yield Problem(f"{len(pickles)} pickle weight file(s) present next to safetensors (ignored, never loaded)",
                      evidence=ev, severity="warning")
    else:
        yield Problem(f"weights are pickle-only ({', '.join(pickles[:3])}): refusing to load them", evidence=ev)
