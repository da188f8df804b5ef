"""CheckInputs: everything a check may look at, each piece built lazily and at most once per run.

A tokenizer-only run never opens the weights; every engine check shares one Engine. A resource that cannot be
built raises ResourceError (cached, so it is not retried); the runner turns it into "skipped: <why>" for the
checks that needed it, while the files/config checks report the underlying problem as a finding.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from findings.crash import describe
from reference_engine.config import (load_generation_config, load_tokenizer_config, parse_config,
                                     read_json)
from reference_engine.errors import ModelDirError

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("auto", "float32", "bfloat16", "float16")


class ResourceError(Exception):
    """A resource (config, tokenizer, weights, engine, gpu) cannot be built for this model."""

    def __init__(self, resource: str, message: str, detail: str = ""):
        self.resource = resource
        self.message = message
        self.detail = detail       # traceback text when the failure was unexpected
        super().__init__(f"{resource}: {message}")


class ThresholdError(ValueError):
    """A per-check threshold in the configuration file has the wrong type."""


def remembered(store: dict, key: Any, build: Callable[[], Any], kept: type[Exception]) -> Any:
    """build()'s value, made once per run and kept in `store`; a `kept` error is remembered and raised again, so
    every check that asks after a failure gets the same reason without asking again."""
    if key not in store:
        try:
            store[key] = build()
        except kept as e:
            store[key] = e
    value = store[key]
    if isinstance(value, kept):
        raise value
    return value


class CheckInputs:
    """What a check run hands each check: the model's resources (built lazily, at most once) and the run's
    choices, every one given to the constructor by the runner (tests give only what they need)."""

    def __init__(self, model_dir: str | Path, *, device: str = "auto", dtype: str = "auto", quick: bool = False,
                 thresholds: dict[str, dict[str, Any]] | None = None, baseline: str | Path | None = None,
                 memory_budget: int | None = None, workload=None,
                 adapter_dir: str | Path | None = None, context_tokens: int | None = None,
                 selected: set[str] | None = None, named: set[str] | None = None, asked: set[str] | None = None,
                 given: dict[str, str] | None = None, shared: dict | None = None,
                 shared_runs: Callable | None = None, on_layer: Callable | None = None,
                 findings: list | None = None):
        self.model_dir = Path(model_dir)
        self.memory_budget = memory_budget       # bytes; None: what the machine has available (budget/plan.py)
        self.plan_fallback: str | None = None    # why the planner could not plan this model (_plan_or_none)
        self.adapter_dir = Path(adapter_dir) if adapter_dir else None   # a LoRA adapter over the model
        self.on_layer = on_layer                 # progress callback handed to a streaming engine
        self.requested_device = device
        self.requested_dtype = dtype
        self.quick = quick                       # --quick: checks should trim their work (fewer prompts/steps)
        self.context_tokens = context_tokens     # --context N: how far the CTX checks read (None: their default)
        self.thresholds = thresholds or {}
        self.baseline = Path(baseline) if baseline else None   # --baseline FILE for drift (DRF) checks
        self.findings: list = [] if findings is None else findings   # the run's findings so far: CMP's "look next"
        self.state: dict[str, Any] = {}          # shared between checks, e.g. golden step results
        self.selected = selected                 # ids of the checks this run runs (None: unknown)
        self.named = named or set()              # ids --select names exactly: a skip of one is an error finding
        self.asked = asked or set()              # ids a selector other than ALL chose (an id, prefix, category)
        self.given = given or {}                 # options given that checks read (--context, --baseline): honoured.py
        self.shared = shared or {}               # SharedRun -> ids of the chosen checks that read it
        self.shared_runs = shared_runs           # runs the engine work checks share (shared_pass.prepare)
        self._cache: dict[str, Any] = {}
        self.built: list[str] = []               # resources actually built, in order
        self.build_seconds: dict[str, float] = {}  # time spent building each resource (failed ones too)
        self.total_build_seconds = 0.0
        self._depth = 0
        # budget.plan.Workload, or how to size it from these inputs (the model's declared lengths); None: no plan
        self.workload = None
        self.workload = workload(self) if callable(workload) else workload

    # ---- resources, each built once -------------------------------------------------------------
    def _get(self, name: str, build: Callable[[], Any]) -> Any:
        if name not in self._cache:
            self._cache[name] = self._build(name, build)
        value = self._cache[name]
        if isinstance(value, ResourceError):
            raise value
        return value

    def _build(self, name: str, build: Callable[[], Any]) -> Any:
        """The resource, or the ResourceError explaining why not; timed so checks are timed without it."""
        started = time.perf_counter()
        self._depth += 1
        try:
            value = build()
            self.built.append(name)
        except ResourceError as e:
            value = e
        except ModelDirError as e:
            value = ResourceError(name, str(e))
        except Exception as e:  # a model that breaks the loader in an unforeseen way: keep the traceback
            value = ResourceError(name, *describe(e))   # MemoryError/RecursionError: brief, frames released
        finally:
            self._depth -= 1
        self.build_seconds[name] = time.perf_counter() - started
        if self._depth == 0:  # config built inside engine is part of the engine's time, not counted twice
            self.total_build_seconds += self.build_seconds[name]
        return value

    # ---- GGUF: a .gguf file, or a directory holding one and no config.json -----------------------
    @property
    def is_gguf(self) -> bool:
        from reference_engine.files.gguf_file import find_gguf
        try:
            return find_gguf(self.model_dir) is not None
        except ModelDirError:
            return True   # a directory of several GGUF files: the gguf resource reports it

    @property
    def gguf(self):
        """The validated GGUFFile (reference_engine.files.gguf_file); ResourceError for a Hugging Face model."""
        def build():
            from reference_engine.files.gguf_file import GGUFFile, find_gguf
            path = find_gguf(self.model_dir)
            if path is None:
                raise ResourceError("gguf", "not a GGUF model (a Hugging Face directory)")
            return GGUFFile.open(path)
        return self._get("gguf", build)

    @property
    def raw_config(self) -> dict:
        if self.is_gguf:   # the config.json a Hugging Face export would hold, from the {arch}.* metadata
            from reference_engine.files.gguf_config import gguf_raw_config
            return self._get("raw_config", lambda: self._adapted_raw(gguf_raw_config(self.gguf)))
        return self._get("raw_config", lambda: self._adapted_raw(read_json(self.model_dir / "config.json")))

    def _adapted_raw(self, raw: dict) -> dict:
        """With an adapter that resized the embeddings, the adapted model's vocabulary is the adapter's."""
        if self.adapter_dir is None:
            return raw
        from reference_engine.adapter import adapted_vocab
        try:
            vocab, untie = adapted_vocab(self.weights), self.weights.unties
        except ResourceError:
            return raw
        raw = raw if vocab is None else {**raw, "vocab_size": vocab}
        return {**raw, "tie_word_embeddings": False} if untie and raw.get("tie_word_embeddings") else raw

    @property
    def config_path(self) -> Path:
        return self.model_dir if self.is_gguf else self.model_dir / "config.json"

    @property
    def config(self):
        return self._get("config", self._parse_config)

    def _parse_config(self):
        config = parse_config(self.raw_config, self.config_path)
        if config.wrapper is not None and not self.is_gguf:   # a multimodal checkpoint: tied as its files say
            from reference_engine.files.text_decoder import text_decoder_view, tie_from_files
            from reference_engine.files.weights import Weights
            config = tie_from_files(config, text_decoder_view(Weights.open(self.model_dir)))
        return config

    @property
    def generation_config(self):
        if self.is_gguf:
            return None   # GGUF has no generation_config.json
        return self._get("generation_config", lambda: load_generation_config(self.model_dir))

    @property
    def tokenizer_config(self) -> dict:
        if self.is_gguf:   # what tokenizer_config.json would say, from tokenizer.ggml.*
            return self._get("tokenizer_config", lambda: {**self.tokenizer.config,
                                                          "chat_template": self.tokenizer.chat_template})
        return self._get("tokenizer_config", lambda: load_tokenizer_config(self.tokenizer_dir))

    @property
    def tokenizer_dir(self) -> Path:
        """Where the tokenizer comes from: an adapter that ships one (it added tokens) overrides the base's."""
        if self.adapter_dir is not None and (self.adapter_dir / "tokenizer.json").is_file():
            return self.adapter_dir
        return self.model_dir

    @property
    def tokenizer(self):
        def build():
            from reference_engine.tokenizer.tokenizer import Tokenizer
            return Tokenizer.from_pretrained(self.tokenizer_dir)
        return self._get("tokenizer", build)

    @property
    def adapter(self):
        """The LoRA adapter (reference_engine.adapter.Adapter) of an adapter run; ResourceError otherwise."""
        def build():
            if self.adapter_dir is None:
                raise ResourceError("adapter", "not an adapter run (check ADAPTER_DIR --base BASE)")
            from reference_engine.adapter import read_adapter
            return read_adapter(self.adapter_dir)
        return self._get("adapter", build)

    def _open_base(self):
        if self.is_gguf:   # dequantized tensor by tensor, under Hugging Face names
            from reference_engine.files.gguf_weights import GGUFWeights, gguf_arch
            return GGUFWeights(self.gguf, gguf_arch(self.gguf))
        from reference_engine.files.weights import Weights
        qconfig = self.quantization_config
        if qconfig is not None:   # logical float32 weights; the stored tensors are its .raw (files/quant/)
            from reference_engine.files.quant import QuantizedWeights
            return QuantizedWeights.open(self.model_dir, qconfig, self.config_path)
        if self._multimodal():       # the text decoder under causal-LM names; the vision tower stays readable
            from reference_engine.files.text_decoder import text_decoder_view
            return text_decoder_view(Weights.open(self.model_dir))
        return Weights.open(self.model_dir)

    def _multimodal(self) -> bool:
        """Read from config.json itself: the config resource may be built from the weights (an adapter's vocab)."""
        from reference_engine.config import architecture_of, text_decoder_of
        try:
            raw = read_json(self.model_dir / "config.json")
            return text_decoder_of(raw, architecture_of(raw, self.config_path)) is not None
        except ModelDirError:        # a broken config is the config checks' finding; the weights still open
            return False

    @property
    def base_weights(self):
        """The base model's own tensor table (the weights without the adapter; = weights without one)."""
        if self.adapter_dir is None:
            return self.weights
        return self._get("base_weights", self._open_base)

    @property
    def weights(self):
        """The model's tensor table; with an adapter, the base's with the adapter merged in (AdaptedWeights)."""
        def build():
            if self.adapter_dir is None:
                return self._open_base()
            from reference_engine.adapter import AdaptedWeights
            return AdaptedWeights(self.base_weights, self.adapter)
        return self._get("weights", build)

    def engine_spec(self):
        """What the engine builder needs (reference_engine/engine_builder.py), device and dtype resolved."""
        from reference_engine.engine_builder import EngineSpec
        return EngineSpec(self.model_dir, workload=self.workload, device=self.device, dtype=self.dtype,
                          memory_budget=self.memory_budget, adapter=self.adapter_dir)

    @property
    def quantization_config(self) -> dict | None:
        """config.json's quantization_config (None: none, a GGUF, or a config.json that cannot be read)."""
        if self.is_gguf:
            return None
        try:
            raw = self.raw_config
        except ResourceError:
            return None
        return raw.get("quantization_config") if isinstance(raw, dict) else None

    @property
    def plan(self):
        """Resident or streaming, predicted peak and passes (reference_engine/budget/plan.py), before loading.
        A model that cannot fit even one layer at a time raises plan.PlanError (the CLI exits 2)."""
        if "plan" not in self._cache:
            from reference_engine.engine_builder import make_engine_plan
            if self.workload is None:
                raise ResourceError("plan", "no workload given, so no memory plan: the engine is built resident")
            self._cache["plan"] = make_engine_plan(self.engine_spec())
        return self._cache["plan"]

    def _plan_or_none(self):
        """The plan, or None without a workload, or when the planner cannot read this model (a broken config,
        a format it does not size): the engine is then built resident without a budget, a fallback recorded
        in self.plan_fallback (the report states it, the run warns) and refused where the run must stream."""
        from reference_engine.engine_builder import fallback_reason
        from reference_engine.streaming.pipeline import PipelineError
        from reference_engine.budget.plan import PlanError
        if self.workload is None or self.plan_fallback is not None:
            return None
        try:
            return self.plan
        except (PlanError, PipelineError):
            raise
        except Exception as e:     # any planner failure: stated, never silent
            self.plan_fallback = fallback_reason(self.engine_spec(), e)
            return None

    @property
    def engine(self):
        def build():
            from reference_engine.engine_builder import build_engine
            return build_engine(self.engine_spec(), self._plan_or_none(), on_layer=self.on_layer).engine
        return self._get("engine", build)

    @property
    def gpu(self):
        """The CUDA device GPU checks run on; ResourceError (-> skipped) on a machine without one."""
        def build():
            import torch
            if not torch.cuda.is_available():
                raise ResourceError("gpu", "no CUDA device available")
            return torch.device("cuda", torch.cuda.current_device())
        return self._get("gpu", build)

    # ---- device and dtype -----------------------------------------------------------------------
    @property
    def device(self) -> str:
        if self.requested_device != "auto":
            return self.requested_device
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def dtype(self) -> str:
        if self.requested_dtype != "auto":
            return self.requested_dtype
        if self.device == "cpu":
            return "float32"  # bf16/fp16 matmuls on CPU are slow and not what anyone serves with
        try:
            declared = self.raw_config.get("torch_dtype") or self.raw_config.get("dtype")
        except ResourceError:
            declared = None
        return declared if declared in DTYPES[1:] else "bfloat16"

    # ---- what the runner calls ------------------------------------------------------------------
    def prepare_engine_runs(self) -> None:
        """Called by an engine check before its own runs: the run's shared passes go first, so the check finds
        its results in self.state (checks/shared/passes.py; the runner sets the hook)."""
        if self.shared_runs is not None:
            self.shared_runs(self)

    def require(self, needs: tuple[str, ...]) -> None:
        """Build every resource a check needs, raising ResourceError for the first that cannot be built."""
        for need in needs:
            if need == "files":
                if self.is_gguf:
                    raise ResourceError("files", "a GGUF file has no Hugging Face files (config.json, tokenizer.json, "
                                                 "safetensors); the GGF checks validate it")
                continue  # the runner validated the directory before any check ran
            if need == "adapter":
                if self.adapter_dir is None:
                    raise ResourceError("adapter", "not an adapter run (check ADAPTER_DIR --base BASE)")
                continue  # LRA001 reports an unreadable adapter; the other LRA checks skip on it
            getattr(self, need)

    def threshold(self, check_id: str, name: str, default: Any) -> Any:
        """A per-check threshold from the configuration file ([tool.llmdoctor.thresholds.<ID>]), else default."""
        value = self.thresholds.get(check_id, {}).get(name, default)
        if value is default or default is None:
            return value
        numbers = (int, float)
        if type(default) in numbers and type(value) in numbers:
            return float(value) if type(default) is float else value  # 1 where 1.0 was meant is fine
        if type(value) is not type(default):
            raise ThresholdError(f"threshold {check_id}.{name} must be {type(default).__name__}, found {value!r}")
        return value
