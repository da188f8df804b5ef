"""Greedy probe answers with top logprobs, alone and while background traffic runs.

Solo: each probe is asked `repeats` times, one request at a time (the noise floor: a server that is not
deterministic even alone says so here). Under load: background clients send the mixed traffic of
probes/load/workload.py while `probe_workers` clients ask each probe `repeats` times again. The comparison
(exact match, near-tie flip, corruption, cross-talk) is the checks' business (checks/endpoint/load/compare.py).
"""
from __future__ import annotations

import threading
import time

from probes.endpoint.client import EndpointError
from probes.load.runner import Background, Target
from probes.load.types import ProbeAnswer, Sample
from probes.load.workload import PROBES, background_jobs


def ask(surface, probe: str, phase: str, max_tokens: int, top_logprobs: int) -> ProbeAnswer:
    answer = ProbeAnswer(probe, phase)
    try:
        generation = surface.chat(PROBES[probe], max_tokens=max_tokens, top_logprobs=top_logprobs)
    except (EndpointError, ValueError, KeyError, TypeError) as e:
        answer.error = f"{type(e).__name__}: {e}" if not isinstance(e, EndpointError) else str(e)
        return answer
    answer.text, answer.finish_reason = generation.text, generation.finish_reason
    answer.tokens = list(generation.tokens or [])
    if generation.tokens is None:
        answer.error = "the server returned no logprobs"
    return answer


def solo(surface, repeats: int, max_tokens: int, top_logprobs: int, deadline: float) -> list[ProbeAnswer]:
    out = []
    for _ in range(repeats):
        for probe in PROBES:
            if time.monotonic() > deadline:
                return out
            out.append(ask(surface, probe, "solo", max_tokens, top_logprobs))
    return out


def under_load(surface, target: Target, repeats: int, max_tokens: int, top_logprobs: int,
               background_workers: int, probe_workers: int, transport=None
               ) -> tuple[list[ProbeAnswer], list[Sample]]:
    """Probe answers while `background_workers` clients keep the server busy; also the background samples."""
    tasks = [(probe, r) for r in range(repeats) for probe in PROBES]
    jobs = background_jobs(max(2 * len(tasks), 10))
    background = Background(target, jobs, background_workers, max_requests=4 * len(jobs), transport=transport)
    background.start()
    settle = time.monotonic() + 2.0     # let the background fill the server's batch before the first probe
    while not background.busy() and time.monotonic() < settle:
        time.sleep(0.02)
    answers: list[ProbeAnswer] = []
    lock = threading.Lock()
    queue = iter(tasks)

    def worker():
        while time.monotonic() < target.deadline:
            with lock:
                task = next(queue, None)
            if task is None:
                return
            answer = ask(surface, task[0], "load", max_tokens, top_logprobs)
            with lock:
                answers.append(answer)
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(probe_workers, 1))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(target.left_s(), 0) + target.timeout_s * 3 + 5)
    finally:
        samples = background.stop()
    return answers, samples
