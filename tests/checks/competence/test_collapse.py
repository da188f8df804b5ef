"""CMP003 on constructed greedy traces: collapse from the first steps on most probes fires (with the run's other
findings as the next step), late loops and varied text do not; the untrained path is info."""
from __future__ import annotations

from checks.competence.collapse import collapse_start, greedy_collapse
from checks.shared.standing import Standing
from checks.shared.probe_runs import GreedyTrace
from checks.shared.prompts import ProbeInput
from findings import Finding


class Ctx:
    """What CMP003 reads: the greedy traces, the standing, the lens (precomputed) and the run's findings."""

    def __init__(self, traces, severity=None, findings=()):
        self.quick = True
        self.selected = {"CMP003", "ACT001"}
        self.findings = list(findings)
        self.state = {"greedy": [(ProbeInput(f"probe {i}", "x", (1, 2)), GreedyTrace((1, 2), t, [], "length"))
                                 for i, t in enumerate(traces)],
                      ("competence", "standing"): Standing(severity, "untrained (weights still at their "
                                                           "initialisation): " if severity else "", {}),
                      ("competence", "lens", True): {"first_failing_layer": 0, "quantized_modules": []}}

    def prepare_engine_runs(self):
        pass


VARIED = [5, 9, 14, 2, 77, 31, 8, 40, 12, 3, 19, 60]


def test_collapse_start_finds_loops_from_the_first_steps_only():
    assert collapse_start([7] * 12) == 0
    assert collapse_start([1, 2, 3] * 4) == 0
    assert collapse_start([9, 4] + [5, 6] * 5) == 2
    assert collapse_start([9, 4, 8] + [5] * 9) is None             # locks at step 3: too late
    assert collapse_start([1, 2, 3, 4] * 3) is None                # period 4: a phrase, not a lock
    assert collapse_start(VARIED) is None


def test_most_probes_locked_fires_with_the_next_step():
    exploding = Finding("ACT001", "activations", "error", "layer 3 mlp explodes")
    problems = list(greedy_collapse(Ctx([[7] * 12, [3, 4] * 6, VARIED], findings=[exploding])))
    assert len(problems) == 1 and problems[0].severity is None          # the declared error
    assert "2 of 3 greedy continuations lock" in problems[0].message
    assert problems[0].evidence["look_next"] == ["ACT001: layer 3 mlp explodes"]
    assert "logit lens fails from layer 0" in problems[0].message


def test_one_locked_probe_or_varied_text_is_quiet():
    assert list(greedy_collapse(Ctx([[7] * 12, VARIED, VARIED[::-1]]))) == []
    assert list(greedy_collapse(Ctx([VARIED, VARIED[::-1]]))) == []


def test_untrained_collapse_is_info():
    problems = list(greedy_collapse(Ctx([[7] * 12, [7] * 12], severity="info")))
    assert [p.severity for p in problems] == ["info"] and problems[0].message.startswith("untrained")


def test_nothing_else_fired_says_the_files_cannot_show_it():
    from checks.competence.next_steps import where_next
    ctx = Ctx([], findings=[Finding("GLD001", "golden", "info", "ok"), Finding("CMP001", "competence", "error", "x")])
    assert where_next(ctx)["look_next"] == [] and "wrong in a way the files cannot show" in where_next(ctx)["note"]
    ctx.selected = {"CMP001", "CMP002"}
    assert "run the full check" in where_next(ctx)["note"]
