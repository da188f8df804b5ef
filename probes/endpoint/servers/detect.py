"""Which server is this? Ask each kind's signature route once, cheapest first; fall back to plain OpenAI."""
from __future__ import annotations

from dataclasses import dataclass, field

from probes.endpoint import openai_api
from probes.endpoint.servers import llama_cpp_python, llamacpp, ollama, tgi, vllm
from probes.endpoint.client import EndpointClient, EndpointError
from probes.endpoint.surface import Surface

# (module with detect(client), surface class), in the order they are tried
KINDS = ((llamacpp, llamacpp.LlamaCppSurface), (tgi, tgi.TgiSurface), (ollama, ollama.OllamaSurface),
         (llama_cpp_python, llama_cpp_python.LlamaCppPythonSurface), (vllm, vllm.VllmSurface))


@dataclass
class Connection:
    surface: Surface
    models: list[str]
    tried: list[str] = field(default_factory=list)   # "kind: why not" for each kind ruled out


def connect(client: EndpointClient, served_name: str | None = None) -> Connection:
    """List the models (the reachability test: EndpointError when the server cannot be asked), then detect."""
    models = [str(m.get("id")) for m in openai_api.list_models(client) if m.get("id") is not None]
    model = served_name or (models[0] if models else None)
    tried = []
    for module, cls in KINDS:
        try:
            info = module.detect(client)
        except (EndpointError, ValueError, KeyError, TypeError) as e:
            tried.append(f"{cls.kind}: {e}")
            continue
        if info is not None:
            return Connection(cls(client, model, info), models, tried)
        tried.append(f"{cls.kind}: answer not in its shape")
    return Connection(Surface(client, model), models, tried)
