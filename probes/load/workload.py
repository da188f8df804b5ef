"""What the load is made of: latency prompts, background traffic for the correctness phase, and the probes.

Background traffic mixes what breaks batched servers: short and medium prompts, prompts sharing a long prefix
(prefix caching), long prompts of several hundred tokens (more than one 512-token prefill chunk: chunked
prefill) and requests the client walks away from after a few tokens (cancellation). Every background prompt
carries a nonce (`K1234Z`) no probe prompt has: a probe answer that shows one carries another request's content.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

NONCE = re.compile(r"K\d{4}Z")
SHARED_PREFIX = ("You are a meticulous assistant for a logistics company. Orders are identified by a code, "
                 "shipments leave from the northern depot every morning, and every answer must be short. ")
FILLER = ("The committee reviewed the quarterly figures for the harbour district, noting that freight volumes "
          "rose while passenger numbers fell slightly after the winter timetable change. ")
TOPICS = ("the history of the bicycle", "how tides work", "a recipe for pancakes", "the rules of chess",
          "why leaves change colour", "how a compass works", "the water cycle", "a day at the seaside")

# the correctness probes: greedy chat questions whose answers run for a while and start differently
PROBES = {
    "count": [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}],
    "colours": [{"role": "user", "content": "List the colours of the rainbow, one per line."}],
    "explain": [{"role": "user", "content": "In two sentences, explain why the sky is blue."}],
}


@dataclass(frozen=True)
class Job:
    """One background or latency request: its prompt, an id, and whether the client cancels it early."""
    prompt_id: str
    prompt: str
    cancel_after: int | None = None      # close the stream after this many text chunks


def latency_prompts(n: int, seed: int = 0) -> list[Job]:
    """n latency requests with prompts of mixed length (a few to ~150 tokens), the same for every level."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        context = FILLER * rng.choice((0, 0, 1, 3, 6))
        jobs.append(Job(f"lat{i}", f"{context}Write a short paragraph about {topic}."))
    return jobs


def background_jobs(n: int, seed: int = 1) -> list[Job]:
    """n background requests cycling through the shapes that stress a batched server (see the module doc)."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        nonce = f"K{rng.randrange(10000):04d}Z"
        topic = TOPICS[i % len(TOPICS)]
        shape = ("short", "shared", "long", "cancel", "medium")[i % 5]
        if shape == "short":
            prompt = f"Order {nonce}: say hello."
        elif shape == "shared":
            prompt = f"{SHARED_PREFIX}Order {nonce}: when does it leave?"
        elif shape == "long":
            prompt = FILLER * 18 + f"Order {nonce}: summarise the text above."    # ~550 tokens: chunked prefill
        elif shape == "medium":
            prompt = FILLER * 4 + f"Order {nonce}: write about {topic}."
        else:
            prompt = f"{SHARED_PREFIX}Order {nonce}: write about {topic}."
        jobs.append(Job(f"bg{i}-{shape}-{nonce}", prompt, cancel_after=2 if shape == "cancel" else None))
    return jobs
