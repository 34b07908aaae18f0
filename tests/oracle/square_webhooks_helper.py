"""Square's own verifier (squareup): `square.utils.webhooks_helper.verify_signature` of
`signature` for `body`, `key` and `url`. Square ships no signer."""
import json
import sys

try:
    from square.utils.webhooks_helper import verify_signature
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)

given = json.load(sys.stdin)
valid = verify_signature(
    request_body=given["body"],
    signature_header=given["signature"],
    signature_key=given["key"],
    notification_url=given["url"],
)
json.dump({"valid": valid}, sys.stdout)
