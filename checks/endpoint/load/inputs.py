"""LoadInputs: what `probe load` measured (probes/load LoadRun), the reference, and derived numbers the load
checks share (level summaries, answer classes, the reference's view of the solo answers), each computed once."""
from __future__ import annotations

from checks.catalogue.inputs import ResourceError
from checks.endpoint.load.compare import classify
from checks.endpoint.reference import Reference
from checks.endpoint.teacher import teacher_force
from probes.load import LoadOptions, LoadRun, summarize
from probes.load.workload import PROBES


class LoadInputs:
    def __init__(self, url: str, run: LoadRun | None, options: LoadOptions, surface=None,
                 reference: Reference | ResourceError | None = None, skip_reason: str = ""):
        self.url, self.run, self.options, self.surface = url, run, options, surface
        self._reference = reference
        self.skip_reason = skip_reason            # why nothing was measured (a dead server)
        self.total_build_seconds = 0.0
        self._levels: list[dict] | None = None
        self._classes: list[dict] | None = None

    def require(self, needs: tuple[str, ...]) -> None:
        if self.run is None:
            raise ResourceError("load", self.skip_reason or "no load run")

    @property
    def levels(self) -> list[dict]:
        if self._levels is None:
            self._levels = [summarize(level, self.options.slo_ttft_ms, self.options.slo_tpot_ms)
                            for level in self.run.levels]
        return self._levels

    def level_labels(self) -> list[str]:
        return [level.label for level in self.run.levels]

    @property
    def classes(self) -> list[dict]:
        """Every answer but each probe's baseline, classified (checks/endpoint/load/compare.py)."""
        if self._classes is None:
            run = self.run
            self._classes = classify(run.solo + run.loaded, run.solo, run.background)
        return self._classes

    def reference_agreement(self) -> dict:
        """Per probe: how many of the first solo answer's tokens are the reference's greedy choice."""
        if isinstance(self._reference, ResourceError) or self._reference is None:
            why = self._reference.message if isinstance(self._reference, ResourceError) else "no reference"
            return {"skipped": why}
        ref = self._reference
        out = {}
        try:
            engine = ref.engine()
        except Exception as e:  # the reference cannot be run: say so instead of failing the summary
            return {"skipped": f"reference engine: {type(e).__name__}: {e}"}
        for answer in self.run.solo:
            if answer.probe in out or answer.error or not answer.tokens:
                continue
            forced = teacher_force(ref, engine, self._prompt_ids(answer.probe), answer.tokens)
            first = forced.first_divergence()
            out[answer.probe] = {"agree": forced.agree, "compared": len(forced.steps),
                                 "first_divergence": None if first is None else
                                 {"t": first.position, "server": first.server_piece,
                                  "reference": ref.piece(first.reference_id), "gap_nats": round(first.gap, 4)}}
        return out

    def _prompt_ids(self, probe: str) -> list[int]:
        messages = PROBES[probe]
        try:
            ids = self.surface.chat_prompt_ids(messages) if self.surface is not None else None
        except Exception:  # no rendering route or a failed request: the reference's rendering of the template
            ids = None
        return ids if ids else self._reference.chat_ids(messages)
