"""EPT082: `response_format` with a JSON schema is honoured (valid JSON) or refused (an HTTP error), never ignored."""
from __future__ import annotations

import json

import jsonschema

from checks.endpoint.chain import answers, scenarios
from checks.endpoint.inputs import EndpointInputs, asks_server
from checks.catalogue.registry import Problem, check


@check("EPT082", category="endpoint", severity="error", needs=("endpoint",),
       hint="enable the server's structured-output backend (vLLM guided decoding, llama.cpp grammars) or refuse "
            "response_format instead of ignoring it")
@asks_server
def structured_output(ctx: EndpointInputs):
    """`response_format` json_schema answered with free text (200 OK) or with JSON that does not validate.

    Asks a one-line question with a strict two-field schema. A server that supports structured output returns
    JSON that validates; one that does not should refuse the request (4xx: the check skips naming it). Free
    text with 200 OK means the schema was silently ignored; JSON that breaks the schema means the constraint
    was not enforced (vllm#15577). An answer cut at max_tokens is a warning (the JSON could not be finished)."""
    answer = answers.ask_chat(ctx, "structured", scenarios.STRUCTURED, feature="response_format json_schema")
    evidence = {"request": scenarios.STRUCTURED, "answer": answer.summary()}
    text = answer.content.strip()
    try:
        value = json.loads(text)
    except ValueError as e:
        if answer.finish_reason == "length" and text[:1] in "{[":
            yield Problem(f"the structured answer ran to max_tokens={scenarios.STRUCTURED['max_tokens']} before its "
                          f"JSON ended", severity="warning", evidence=evidence)
            return
        yield Problem(f"response_format json_schema was ignored: HTTP 200 with text that is not JSON ({e}): "
                      f"{text[:80]!r}", evidence=evidence)
        return
    errors = [e.message for e in jsonschema.Draft202012Validator(scenarios.ANSWER_SCHEMA).iter_errors(value)]
    if errors:
        yield Problem(f"the structured answer is JSON but breaks the schema: {'; '.join(errors[:3])}",
                      evidence={**evidence, "schema_errors": errors[:10]})
        return
    yield Problem(f"response_format honoured: {text[:80]}", severity="info", evidence=evidence)
