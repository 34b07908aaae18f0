#!/usr/bin/env python3
"""A tiny local target for portaria's URL forwarding: prints each forward and answers 200.

Run it with `python3 contrib/print-forward.py 3000` and point an endpoint at it with
`forward = { url = "http://127.0.0.1:3000/payments" }`. Answer something else than 2xx
(`python3 contrib/print-forward.py 3000 500`) to watch portaria retry.
"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
STATUS = int(sys.argv[2]) if len(sys.argv) > 2 else 200


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        print(f"--- {self.path}")
        for name in ("Idempotency-Key", "Portaria-Event-Id", "Portaria-Endpoint",
                     "Portaria-Event-Type", "Portaria-Attempt", "webhook-id",
                     "webhook-timestamp", "webhook-signature"):
            if name in self.headers:
                print(f"{name}: {self.headers[name]}")
        print(body.decode("utf-8", "replace"), flush=True)
        self.send_response(STATUS)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
