"""PairInputs: what a DIF check looks at, two models at once (`llmdoctor diff REF CAND`).

Each side is a Hugging Face directory or a GGUF file (the candidate may also be a baseline JSON written by
`llmdoctor baseline`). A model side wraps an ordinary CheckInputs, so its resources (config, tokenizer,
weights, engine: streaming when the memory plan says so) are built lazily, once, with the same error handling
as `check`; a missing resource makes the DIF check that needed it "skipped: needs ...".
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from checks.catalogue.inputs import CheckInputs, ResourceError
from checks.catalogue.registry import Skip
from reference_engine.errors import ModelDirError

KINDS = ("hf", "gguf", "baseline")


def input_kind(path: str | Path, candidate: bool) -> str:
    """'hf', 'gguf' or 'baseline' for a diff input; ModelDirError (exit 2) for anything else."""
    from reference_engine.files.gguf_file import find_gguf
    path = Path(path)
    if not path.exists():
        raise ModelDirError(path, "does not exist")
    if path.is_file() and path.suffix.lower() == ".json":
        if not candidate:
            raise ModelDirError(path, "a baseline JSON can only be the candidate (the reference must run)")
        return "baseline"
    if find_gguf(path) is not None:
        return "gguf"
    if path.is_dir():
        return "hf"
    raise ModelDirError(path, "not a model directory, GGUF file or baseline JSON")


class Side:
    """One model of the pair. `.ctx` is its CheckInputs (None for a baseline), `.baseline` the document."""

    def __init__(self, path: str | Path, role: str, kind: str, *, device: str, dtype: str, quick: bool,
                 memory_budget: int | None, workload=None, adapter: str | Path | None = None):
        self.path, self.role, self.kind = Path(path), role, kind
        self.adapter = Path(adapter) if adapter else None       # a LoRA adapter run on `path` (its base)
        name = self.path.name or self.path
        self.label = f"{role} ({name})" if self.adapter is None else f"{role} ({self.adapter.name} on {name})"
        self.ctx = None if kind == "baseline" else CheckInputs(self.path, device=device, dtype=dtype, quick=quick,
                                                               memory_budget=memory_budget, workload=workload,
                                                               adapter_dir=self.adapter)
        self._baseline = None

    @property
    def baseline(self) -> dict:
        if self.kind != "baseline":
            raise ValueError("not a baseline side")
        if self._baseline is None:
            from checks.shared.baseline_file import BaselineError, load
            try:
                self._baseline = load(self.path)
            except BaselineError as e:
                raise ResourceError("baseline", str(e)) from None
        return self._baseline

    def need_model(self, what: str) -> CheckInputs:
        """The side's CheckInputs; Skip when this side is a baseline file (it holds no `what`)."""
        if self.ctx is None:
            raise Skip(f"the {self.role} is a baseline file: it records no {what}")
        return self.ctx

    # resources (ResourceError when they cannot be built; the runner reports the check as skipped)
    @property
    def raw_config(self) -> dict:
        ctx = self.need_model("config")
        if self.kind == "gguf":
            def build():
                from reference_engine.files.gguf_config import gguf_raw_config
                from reference_engine.files.gguf_file import GGUFFile, find_gguf
                return gguf_raw_config(GGUFFile.open(find_gguf(self.path)))
            return ctx._get("gguf_raw_config", build)
        return ctx.raw_config

    @property
    def config(self):
        """The parsed ModelConfig (defaults filled in), from config.json or the GGUF metadata."""
        ctx = self.need_model("config")
        if self.kind == "gguf":
            from reference_engine.config import parse_config
            return ctx._get("gguf_config", lambda: parse_config(self.raw_config, self.path))
        return ctx.config

    @property
    def generation_config(self):
        ctx = self.need_model("generation config")
        if self.kind == "gguf":
            return None
        return ctx.generation_config

    @property
    def tokenizer(self):
        return self.need_model("tokenizer").tokenizer

    @property
    def weights(self):
        ctx = self.need_model("weights")
        if self.kind == "gguf":
            def build():
                from reference_engine.files.gguf_file import find_gguf
                from reference_engine.files.gguf_weights import GGUFWeights
                weights = GGUFWeights.open(find_gguf(self.path))
                if self.adapter is None:
                    return weights
                from reference_engine.adapter import AdaptedWeights
                return AdaptedWeights(weights, ctx.adapter)
            return ctx._get("gguf_weights", build)
        return ctx.weights

    @property
    def engine(self):
        return self.need_model("forward pass").engine


class PairInputs:
    """The DIF checks' context: `ref`, `cand` (Side), `texts` (extra corpus lines from --text), `state`."""

    def __init__(self, ref: str | Path, cand: str | Path, *, device: str = "auto", dtype: str = "auto",
                 quick: bool = False, thresholds: dict[str, dict[str, Any]] | None = None,
                 text: str | None = None, memory_budget: int | None = None, ctx_len: int | None = None,
                 chunks: int | None = None, workload=None, ref_adapter: str | Path | None = None,
                 cand_adapter: str | Path | None = None):
        half = None if memory_budget is None else memory_budget // 2   # both models may be held at once
        self.ref = Side(ref, "reference", input_kind(ref, False), device=device, dtype=dtype, quick=quick,
                        memory_budget=half, workload=workload, adapter=ref_adapter)
        self.cand = Side(cand, "candidate", input_kind(cand, True), device=device, dtype=dtype, quick=quick,
                         memory_budget=half, workload=workload, adapter=cand_adapter)
        self.quick = quick
        self.thresholds = thresholds or {}
        self.text = text                     # --text FILE contents (None: built-in corpus only)
        self.ctx_len = ctx_len               # --ctx: llama-perplexity's -c (None: 512, capped by the models)
        self.max_chunks = chunks             # --chunks
        self.state: dict[str, Any] = {}

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.ref, self.cand

    # what the runner's run_one uses
    @property
    def total_build_seconds(self) -> float:
        return sum(s.ctx.total_build_seconds for s in self.sides if s.ctx is not None)

    @property
    def build_seconds(self) -> dict[str, float]:
        out = {}
        for side in self.sides:
            if side.ctx is not None:
                out.update({f"{side.role}.{k}": v for k, v in side.ctx.build_seconds.items()})
        return out

    @property
    def device(self) -> str:
        return self.ref.ctx.device

    @property
    def dtype(self) -> str:
        return self.ref.ctx.dtype

    def require(self, needs: tuple[str, ...]) -> None:
        """DIF checks need only "pair"; each builds what it reads from either side (lazily)."""

    def threshold(self, check_id: str, name: str, default: Any) -> Any:
        return CheckInputs.threshold(self, check_id, name, default)  # same typing rules as `check`

    def engines(self):
        """(reference engine, candidate engine), Skip when the candidate is a baseline file."""
        return self.ref.engine, self.cand.engine
