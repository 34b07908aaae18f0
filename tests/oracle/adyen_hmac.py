"""Adyen's own HMAC helpers (PyPI `adyen`, `Adyen.util`).

stdin:  {"key": "<hex HMAC key>", and one of
         "item": {NotificationRequestItem fields}   -> {"signature": generate_notification_sig}
         "payload": "<raw body text>"               -> {"signature": generate_payload_sig}
         "notification": {the whole body}           -> {"valid": is_valid_hmac_notification}
         plus, with "payload", "check": "<sig>"     -> also {"valid": is_valid_hmac_payload}}
"""
import json
import sys

try:
    from Adyen.util import (
        generate_notification_sig,
        generate_payload_sig,
        is_valid_hmac_notification,
        is_valid_hmac_payload,
    )
except ImportError as error:
    print(f"adyen is not installed: {error}", file=sys.stderr)
    sys.exit(77)

request = json.load(sys.stdin)
key = request["key"]
answer = {}
if "item" in request:
    answer["signature"] = generate_notification_sig(request["item"], key).decode()
if "payload" in request:
    payload = request["payload"].encode()
    answer["signature"] = generate_payload_sig(payload, key).decode()
    if "check" in request:
        answer["valid"] = is_valid_hmac_payload(request["check"], key, payload)
if "notification" in request:
    answer["valid"] = bool(is_valid_hmac_notification(request["notification"], key))
print(json.dumps(answer))
