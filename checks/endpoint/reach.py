"""EPT001: can the server be asked at all, and does it serve the model we were told?"""
from __future__ import annotations

from checks.endpoint.inputs import EndpointInputs
from checks.catalogue.registry import Problem, check


@check("EPT001", category="endpoint", severity="error", needs=("endpoint",),
       hint="start the server, check the URL/port and the API key variable, or raise --timeout")
def reachable(ctx: EndpointInputs):
    """The server answers /v1/models and serves the requested model name.

    A dead, wedged or slow server is reported here with the HTTP or transport error (every request is bounded
    in time and count, retried politely on connection errors, 429 and 5xx); the other EPT checks are then
    skipped. With --served-name, that name must be one the server lists."""
    error = ctx.connection_error
    if error is not None:
        yield Problem(f"the server at {ctx.url} could not be asked: {error}",
                      evidence={"url": ctx.url, "route": error.route, "status": error.status})
        return
    conn = ctx.connection
    evidence = {"url": ctx.url, "server": conn.surface.kind, "models": conn.models, "model": conn.surface.model,
                "detection": conn.tried}
    if conn.surface.model is not None and conn.models and conn.surface.model not in conn.models:
        yield Problem(f"the server does not list the model {conn.surface.model!r} (it serves {conn.models})",
                      evidence=evidence)
        return
    yield Problem(f"{conn.surface.label} at {ctx.url} serves {conn.models or ['(no model list)']}",
                  severity="info", evidence=evidence, hint="")     # it answered: the failure hint does not apply
