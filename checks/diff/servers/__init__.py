"""`llmdoctor diff URL_A URL_B`: two live OpenAI-compatible servers that should serve the same model, compared
request by request (inputs.py: ServerPairInputs). Its checks declare needs=("servers",) and run only there
(llmdoctor/run/server_diff.py): greedy agreement (DIF070), top-logprob KL by position (DIF071), prompt token
counts (DIF072), tool-call and structured-output parity (DIF073)."""
