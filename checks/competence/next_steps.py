"""Where to look next when a competence check fails: the other checks in this run that saw something odd in
the model (a quantized module whose dequantized statistics stand apart, a layer whose activations explode, a
tensor the config disagrees with), or, when none did, that the weights are wrong in a way the files cannot
show. The runner hands every check the run's findings so far (ctx.findings); the CMP checks run last."""
from __future__ import annotations

from findings import Severity

FAMILY = "CMP"
SHOWN = 8


def where_next(ctx) -> dict:
    """{"look_next": [check id: message, ...], "note": one line}."""
    seen = [f for f in getattr(ctx, "findings", []) or []
            if f.check[:3] != FAMILY and Severity.parse(f.severity).rank >= Severity.WARNING.rank]
    ran = len(getattr(ctx, "selected", ()) or ())
    if seen:
        rows = [f"{f.check}: {f.message}" for f in seen[:SHOWN]]
        return {"look_next": rows, "note": f"{len(seen)} other finding(s) in this run see something odd: "
                                           "start there"}
    if ran and all(c[:3] == FAMILY for c in ctx.selected):
        note = ("only competence checks ran: run the full check to see whether the files, the config or a "
                "quantized module explain it")
    else:
        note = ("no other check in this run sees anything odd: the weights are wrong in a way the files cannot "
                "show (compare with a healthy copy: llmdoctor diff)")
    return {"look_next": [], "note": note}
