"""One module per server kind, each a Surface over that server's own routes (llamacpp.py, llama_cpp_python.py,
vllm.py, tgi.py, ollama.py), and detect.py: which kind a server is, asked cheapest first, plain OpenAI
(probes/endpoint/openai_api.py) when none answers."""
