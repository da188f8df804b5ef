"""What the user asked for explicitly happens, or the run says why and fails (docs/context.md "Options").

An option given on the command line (`--context N`, `--baseline FILE`) or a check named by its id in --select is
a request, not a hint: when no check of the run reads the option it is refused before anything is loaded (exit 2,
one line); when a check that reads it ends "skipped", or a check named by its id cannot run (a resource it needs
cannot be built, registry.CannotRun), the skip becomes an error finding naming why, so a CI gate never passes on
work that was asked for and not done. A named check that does not apply to the model (registry.Skip) stays
skipped.
"""
from __future__ import annotations

from checks.catalogue.inputs import ResourceError
from checks.catalogue.registry import CheckSpec
from findings import Finding, Severity
from llmdoctor.run.selection import resolve_retired, specificity

# the option -> the id prefix of the checks that read it (the only ones it changes)
OPTION_READERS = {"--context": "CTX", "--baseline": "DRF"}
HINT = ("The option or the check was asked for and could not run: fix what the reason names, or drop the option "
        "(or the check from --select) if it does not apply to this model.")


class OptionError(ValueError):
    """An explicit option no check of the run can honour (exit 2, one line)."""


def given_options(context: int | None, baseline) -> dict[str, str]:
    """The options among OPTION_READERS that were given, with their values as typed."""
    given = {"--context": context, "--baseline": baseline}
    return {name: str(value) for name, value in given.items() if value is not None}


def refuse_unread(chosen: list[CheckSpec], given: dict[str, str]) -> None:
    """OptionError for an option none of the chosen checks reads (--select/--ignore left them all out)."""
    for option, value in given.items():
        prefix = OPTION_READERS[option]
        if not any(spec.id.startswith(prefix) for spec in chosen):
            raise OptionError(f"{option} {value} is read only by the {prefix} checks, and --select/--ignore leave "
                              f"none of them in this run: select {prefix} or drop {option}")


def selected_ids(chosen: list[CheckSpec], select: list[str] | None) -> tuple[set[str], set[str]]:
    """(ids named exactly by a selector, ids chosen by any selector other than ALL: an id, a prefix, a category)."""
    selectors, _ = resolve_retired(list(select or []))
    named = {spec.id for spec in chosen if any(s.strip().upper() == spec.id for s in selectors)}
    asked = {spec.id for spec in chosen if any((specificity(s, spec) or 0) > 0 for s in selectors)}
    return named, asked


def refuse_past_declared(ctx, context: int | None) -> None:
    """OptionError for --context N beyond the positions the model declares: the reading would shrink to the
    declared length behind the user's back. A config that cannot be read is left to the checks (they then end
    skipped, an error finding under --context)."""
    if context is None:
        return
    try:
        declared = int(ctx.config.max_position_embeddings)
    except ResourceError:
        return
    if context > declared:
        raise OptionError(f"--context {context} is beyond the {declared} positions the model declares "
                          f"(max_position_embeddings in {ctx.config_path}): give --context {declared} or less")


def unhonoured(spec: CheckSpec, reason: str, blocked: bool, ctx) -> Finding | None:
    """The error finding for a skipped check the run asked for; None for a skip nothing asked for. Asked: an
    option it reads was given (any skip), or --select names its id and it could not run (blocked: a resource
    that cannot be built, registry.CannotRun); a named check that does not apply (Skip: no experts to route,
    no such field) stays skipped, there is nothing to examine."""
    given = getattr(ctx, "given", {})
    why = [f"{option} {value} was given" for option, value in given.items()
           if spec.id.startswith(OPTION_READERS[option])]
    if blocked and spec.id in getattr(ctx, "named", set()):
        why.insert(0, "--select names it")
    if not why:
        return None
    return Finding(check=spec.id, category=spec.category, severity=Severity.ERROR,
                   message=f"{spec.id} did not run although {' and '.join(why)}: {reason}",
                   evidence={"asked_by": why, "reason": reason}, hint=HINT)
