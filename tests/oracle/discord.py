"""Discord: signs `timestamp + body` as Discord does (PyNaCl, Ed25519) with a key made here,
and checks the signature with discord-interactions' `verify_key`, the library Discord's docs
point to.

stdin:  {"timestamp": "1700000000", "body": "...", "seed_hex": "<64 hex, optional>"}
stdout: {"public_key": "<hex>", "signature": "<hex>", "library_verifies": true,
         "library_verifies_tampered": false}
"""

import json
import sys

try:
    import nacl.signing
    from discord_interactions import verify_key
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(77)

req = json.load(sys.stdin)
seed = bytes.fromhex(req["seed_hex"]) if req.get("seed_hex") else None
key = nacl.signing.SigningKey(seed) if seed else nacl.signing.SigningKey.generate()
timestamp = req["timestamp"]
body = req["body"].encode()
signature = key.sign(timestamp.encode() + body).signature.hex()
public_key = key.verify_key.encode().hex()
# verify_key prints its exception on failure: keep stdout for the answer.
sys.stdout, real_stdout = sys.stderr, sys.stdout
ok = verify_key(body, signature, timestamp, public_key)
tampered = verify_key(body + b" ", signature, timestamp, public_key)
sys.stdout = real_stdout
json.dump(
    {
        "public_key": public_key,
        "signature": signature,
        "library_verifies": ok,
        "library_verifies_tampered": tampered,
    },
    sys.stdout,
)
