"""Slack's own signer and verifier (slack-sdk): signs {body, timestamp} with `secret`, and
checks `signature` (if given) at `now` with `SignatureVerifier.is_valid`."""
import json
import sys

try:
    from slack_sdk.signature import Clock, SignatureVerifier
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)

given = json.load(sys.stdin)


class FixedClock(Clock):
    def now(self) -> float:
        return float(given.get("now", given["timestamp"]))


verifier = SignatureVerifier(given["secret"], clock=FixedClock())
out = {"signature": verifier.generate_signature(timestamp=str(given["timestamp"]), body=given["body"])}
if "signature" in given:
    out["valid"] = verifier.is_valid(given["body"], str(given["timestamp"]), given["signature"])
json.dump(out, sys.stdout)
