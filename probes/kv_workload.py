"""Workloads for the KV-cache probe: synthetic (Poisson arrivals, lognormal lengths) or a replayed trace.

A trace is JSON Lines, one request per line: {"arrival_s": 0.13, "prompt_tokens": 812, "output_tokens": 96}
(extra keys are ignored), so an SRE can export production request logs and replay them.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from reference_engine.errors import ModelDirError


@dataclass(frozen=True, slots=True)
class Request:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class SyntheticSpec:
    """Poisson arrivals at `rate` requests/s; prompt and output lengths lognormal around their medians."""
    requests: int = 20_000
    rate: float = 20.0
    prompt_median: float = 256.0
    prompt_sigma: float = 1.0
    output_median: float = 128.0
    output_sigma: float = 0.8
    max_total: int = 4096        # lengths are clipped so prompt + output fits the context
    seed: int = 0

    def describe(self) -> str:
        return (f"synthetic: {self.requests} requests, Poisson {self.rate:g}/s, prompt lognormal(median "
                f"{self.prompt_median:g}, sigma {self.prompt_sigma:g}), output lognormal(median "
                f"{self.output_median:g}, sigma {self.output_sigma:g}), max {self.max_total} tokens, seed {self.seed}")


def synthetic(spec: SyntheticSpec) -> list[Request]:
    rng = random.Random(spec.seed)
    now, out = 0.0, []
    for _ in range(spec.requests):
        now += rng.expovariate(spec.rate)
        prompt = _lognormal(rng, spec.prompt_median, spec.prompt_sigma, 1, spec.max_total - 1)
        output = _lognormal(rng, spec.output_median, spec.output_sigma, 1, spec.max_total - prompt)
        out.append(Request(now, prompt, output))
    return out


def _lognormal(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    value = round(rng.lognormvariate(math.log(median), sigma))
    return max(low, min(high, value))


def load_trace(path: str | Path) -> list[Request]:
    """Read a JSONL trace; a bad line is a one-line ModelDirError naming the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ModelDirError(path, f"cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ModelDirError(path, "trace is not UTF-8 text (expected JSON Lines)") from None
    out = [_parse_line(path, number, line) for number, line in enumerate(lines, 1) if line.strip()]
    if not out:
        raise ModelDirError(path, "trace has no requests")
    return sorted(out, key=lambda r: r.arrival_s)


def _parse_line(path: Path, number: int, line: str) -> Request:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ModelDirError(path, f"line {number}: not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ModelDirError(path, f"line {number}: expected an object with arrival_s, prompt_tokens, output_tokens")
    try:
        arrival, prompt, output = float(row["arrival_s"]), row["prompt_tokens"], row["output_tokens"]
    except KeyError as exc:
        raise ModelDirError(path, f"line {number}: missing {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise ModelDirError(path, f"line {number}: arrival_s must be a number") from None
    for name, value in (("prompt_tokens", prompt), ("output_tokens", output)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "prompt_tokens" else 0):
            raise ModelDirError(path, f"line {number}: {name} must be a non-negative integer "
                                      f"(prompt at least 1), found {value!r}")
    if not math.isfinite(arrival) or arrival < 0:
        raise ModelDirError(path, f"line {number}: arrival_s must be a finite number >= 0, found {arrival!r}")
    return Request(arrival, prompt, output)


def write_trace(requests: list[Request], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in requests:
            f.write(json.dumps({"arrival_s": round(r.arrival_s, 6), "prompt_tokens": r.prompt_tokens,
                                "output_tokens": r.output_tokens}) + "\n")
