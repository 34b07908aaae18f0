#!/usr/bin/env python3
"""packaging/cloudflared/check.py: checks that config.yml (next to this file) parses as YAML and
routes only /webhooks/... to portaria's public listener, `[server] listen` in
packaging/portaria.toml, with the 404 catch-all last and nothing routed to the admin listener.
Run from .ci/run; needs PyYAML (pip install pyyaml). Exit 1 with a line per problem."""

import re
import sys
import tomllib
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "config.yml"
PORTARIA = HERE.parent / "portaria.toml"
ADMIN_DEFAULT = "127.0.0.1:9464"

# Paths a rule for portaria must send through, and paths it must not.
MUST_MATCH = ["/webhooks/pagarme", "/webhooks/stripe", "/webhooks/a/b"]
MUST_NOT_MATCH = ["/", "/metrics", "/healthz", "/readyz", "/webhooks", "/webhooksx/a", "/x/webhooks/a"]


def main() -> int:
    problems = []
    config = yaml.safe_load(CONFIG.read_text())
    server = tomllib.loads(PORTARIA.read_text())["server"]
    public = f"http://{server['listen']}"
    admin = server.get("admin_listen", ADMIN_DEFAULT)

    for key in ("tunnel", "credentials-file"):
        if key not in config:
            problems.append(f"no `{key}`")
    rules = config.get("ingress")
    if not isinstance(rules, list) or not rules:
        problems.append("no `ingress` list")
        rules = []
    if rules and rules[-1] != {"service": "http_status:404"}:
        problems.append(f"the last rule is {rules[-1]!r}, not the catch-all `service: http_status:404`")
    for n, rule in enumerate(rules[:-1], 1):
        service = rule.get("service", "")
        if admin in service or "9464" in service:
            problems.append(f"rule {n} sends traffic to the admin listener ({service})")
        if service != public:
            problems.append(f"rule {n} sends traffic to {service!r}, not portaria's listen ({public})")
        if "hostname" not in rule:
            problems.append(f"rule {n} has no hostname: it would match every hostname on the tunnel")
        path = rule.get("path")
        if not path:
            problems.append(f"rule {n} has no path: it would send every path to portaria")
            continue
        pattern = re.compile(path)
        for p in MUST_MATCH:
            if not pattern.search(p):
                problems.append(f"rule {n}: path {path!r} does not match {p}")
        for p in MUST_NOT_MATCH:
            if pattern.search(p):
                problems.append(f"rule {n}: path {path!r} matches {p}, which must get 404")

    for problem in problems:
        print(f"{CONFIG.relative_to(HERE.parent.parent)}: {problem}")
    if not problems:
        print(f"ok: {CONFIG.name} sends only ^/webhooks/ to {public}, everything else 404")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
