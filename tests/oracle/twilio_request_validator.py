"""Twilio's own validator (twilio): `RequestValidator(token).compute_signature(url, params)`
for a form (`params`: [[name, value], ...]) or, for a JSON `body`, `compute_hash(body)`; and,
when `signature` is given, `validate(url, params or body, signature)`."""
import json
import sys

try:
    from twilio.request_validator import RequestValidator
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)


class MultiDict(dict):
    """The shape of a web framework's form (Flask's `getall`), for repeated names."""

    def getall(self, name):
        return self[name]


given = json.load(sys.stdin)
validator = RequestValidator(given["token"])
out = {}
if "params" in given:
    params = MultiDict()
    for name, value in given["params"]:
        params.setdefault(name, []).append(value)
    out["signature"] = validator.compute_signature(given["url"], params)
    checked = params
else:
    out["body_sha256"] = validator.compute_hash(given["body"])
    checked = given["body"]
if "signature" in given:
    out["valid"] = validator.validate(given["url"], checked, given["signature"])
json.dump(out, sys.stdout)
