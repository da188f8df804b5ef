"""Probing a live inference server: a bounded HTTP client and one small adapter per server surface.

`connect(client, served_name)` lists the models and picks the adapter (llama.cpp, TGI, Ollama,
llama-cpp-python, vLLM, else plain OpenAI). Adapters return plain data (probes/endpoint/types.py); the
comparison with the reference engine lives in checks/endpoint/.
"""
from probes.endpoint.client import Budget, EndpointClient, EndpointError, api_key_from_env, normalize_url
from probes.endpoint.servers.detect import Connection, connect
from probes.endpoint.surface import Surface
from probes.endpoint.types import Generation, SamplingDefaults, ServerContext, StopSet, TokenLogprob

__all__ = ["Budget", "EndpointClient", "EndpointError", "api_key_from_env", "normalize_url", "Connection", "connect",
           "Surface", "Generation", "SamplingDefaults", "ServerContext", "StopSet", "TokenLogprob"]
