#!/usr/bin/env python3
"""A portaria pipe handler: `forward = { pipe = ["python3", "/srv/pipe-handler.py"] }`.

One JSON event per line on stdin, one JSON answer per line on stdout (docs/forwarding.md,
"The pipe protocol"). With PIPE_HANDLER_FILE set, each event line is appended to that file;
otherwise a line about it goes to stderr, which portaria logs. Ends at EOF on stdin.
"""
import base64, json, os, sys

out = os.environ.get("PIPE_HANDLER_FILE")
for line in sys.stdin:
    event = json.loads(line)
    try:
        body = event["body"].encode() if "body" in event else base64.b64decode(event["body_base64"])
        # Handle the event here; raise to have portaria retry it later. Trust event["signed_id"]
        # over the body (Mercado Pago signs no body: fetch the payment by it), and event_type
        # only if event["event_type_signed"] (docs/forwarding.md, "What the signature covers").
        if out:
            with open(out, "a") as f:
                f.write(line)
        else:
            print(f"event {event['id']} ({event['event_type']}): {len(body)} bytes", file=sys.stderr)
        answer = {"id": event["id"], "ok": True}
    except Exception as e:
        answer = {"id": event["id"], "ok": False, "error": str(e)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
