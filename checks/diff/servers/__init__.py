"""`llmdoctor diff URL_A URL_B`: two live OpenAI-compatible servers that should serve the same model, compared
request by request (context.py: ServerPairContext). Its checks declare needs=("servers",) and run only there
(llmdoctor/run/server_diff.py): greedy agreement (DIF060), top-logprob KL by position (DIF061), prompt token
counts (DIF062), tool-call and structured-output parity (DIF063)."""
