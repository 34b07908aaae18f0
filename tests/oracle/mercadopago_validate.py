"""Mercado Pago's own validator (PyPI `mercadopago`, `WebhookSignatureValidator`).

stdin:  {"secret", "x_signature", "x_request_id" (or null), "data_id" (or null)}
stdout: {"valid": true} or {"valid": false, "reason": "<SignatureFailureReason>"}
No tolerance is passed (the SDK's default: no window); portaria checks its own.
"""
import json
import sys

try:
    from mercadopago.webhook import InvalidWebhookSignatureError, WebhookSignatureValidator
except ImportError as error:
    print(f"mercadopago (with mercadopago.webhook) is not installed: {error}", file=sys.stderr)
    sys.exit(77)

request = json.load(sys.stdin)
try:
    WebhookSignatureValidator.validate(
        request["x_signature"],
        request.get("x_request_id"),
        request.get("data_id"),
        request["secret"],
    )
    answer = {"valid": True}
except InvalidWebhookSignatureError as error:
    answer = {"valid": False, "reason": error.reason.value}
print(json.dumps(answer))
