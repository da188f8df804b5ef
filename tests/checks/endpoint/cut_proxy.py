"""A gateway in front of a live server that silently cuts the middle out of long completion prompts, for the
`probe endpoint --context N` tests (test_context_reading.py): the server answers, and only the prompt counts
(usage.prompt_tokens) or its echo show that the model read less than was sent."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class MiddleCut:
    """A proxy that drops the middle third of any prompt over `over` characters (what a truncating gateway does)."""

    def __init__(self, upstream: str, over: int = 2000):
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                r = httpx.get(owner.upstream + self.path, timeout=60)
                self.reply(r.status_code, r.content)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompt = body.get("prompt")
                if isinstance(prompt, str) and len(prompt) > owner.over:
                    third = len(prompt) // 3
                    body["prompt"] = prompt[:third] + prompt[2 * third:]
                r = httpx.post(owner.upstream + self.path, json=body, timeout=600)
                self.reply(r.status_code, r.content)

            def reply(self, status, content):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        self.upstream, self.over = upstream, over
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
