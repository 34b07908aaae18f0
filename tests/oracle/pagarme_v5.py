"""Pagar.me v5: an RSA key made here (cryptography), its JWK as PyJWT writes it, and an RS256
(RSASSA-PKCS1-v1_5, SHA-256) signature of the raw body in Pagar.me's header format
`alg=RS256; kid=<kid>; signature=<base64url>`. Pagar.me publishes no test vector and no
library that signs; this is what its modules verify (openssl_verify, OPENSSL_ALGO_SHA256).

stdin:  {"body": "...", "kid": "k1", "bits": 2048}
stdout: {"jwk": {...}, "header": "alg=RS256; kid=k1; signature=..."}
"""

import base64
import json
import sys

try:
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)

req = json.load(sys.stdin)
private = rsa.generate_private_key(public_exponent=65537, key_size=req.get("bits", 2048))
jwk = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
jwk.update({"kid": req["kid"], "use": "sig", "alg": "RS256"})
signature = RSAAlgorithm(RSAAlgorithm.SHA256).sign(req["body"].encode(), private)
encoded = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
# The library checks its own signature too.
assert RSAAlgorithm(RSAAlgorithm.SHA256).verify(req["body"].encode(), private.public_key(), signature)
json.dump({"jwk": jwk, "header": f"alg=RS256; kid={req['kid']}; signature={encoded}"}, sys.stdout)
