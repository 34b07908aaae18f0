"""Paddle's own SDK (paddle-python-sdk): the `h1` HMAC of `<ts>:<body>` for `secret`
(`PaddleSignature.calculate_hmac`), and, when `header` is given, `Verifier().verify` (5 s drift
check against the real clock) of a request carrying it."""
import json
import sys

try:
    from paddle_billing.Notifications import Secret, Verifier
    from paddle_billing.Notifications.PaddleSignature import PaddleSignature
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)

given = json.load(sys.stdin)
body = given["body"]
out = {
    "h1": PaddleSignature.calculate_hmac(given["secret"], f"{given['ts']}:{body}".encode()).hexdigest(),
}
if "header" in given:

    class Request:
        def __init__(self):
            self.headers = {"Paddle-Signature": given["header"]}
            self.body = body.encode()

    out["valid"] = bool(Verifier().verify(Request(), Secret(given["secret"])))
json.dump(out, sys.stdout)
