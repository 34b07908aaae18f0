#!/bin/sh
# portaria alert command: posts each alert to an ntfy topic (https://ntfy.sh or your own server).
#
#   [alerts]
#   command = ["/usr/local/lib/portaria/ntfy.sh"]
#
# Environment (systemd: in the unit's EnvironmentFile, e.g. /etc/portaria/portaria.env):
#   NTFY_URL    the topic's URL, e.g. https://ntfy.sh/portaria-alerts-5f2c (required)
#   NTFY_TOKEN  an access token, for a protected topic (optional)
# Needs curl and python3. The alert's JSON is on stdin; exits non-zero if ntfy refused it, so
# portaria logs the failure and tries again at its next tick.
set -eu
: "${NTFY_URL:?set NTFY_URL to the topic URL, e.g. https://ntfy.sh/portaria-alerts-5f2c}"

json=$(cat)
eval "$(printf '%s' "$json" | python3 -c '
import json, shlex, sys
a = json.load(sys.stdin)
for k in ("kind", "endpoint", "message"):
    print("alert_%s=%s" % (k, shlex.quote(str(a.get(k) or ""))))
')"

case "$alert_kind" in
    dead|storage|unreachable) priority=high; tags=rotating_light ;;
    *) priority=default; tags=warning ;;
esac

# The URL and the token go to curl on its stdin (-K -), never on its command line, where any
# user on the machine could read them (ps).
{
    printf 'url = "%s"\n' "$NTFY_URL"
    if [ -n "${NTFY_TOKEN:-}" ]; then
        printf 'header = "Authorization: Bearer %s"\n' "$NTFY_TOKEN"
    fi
} | curl --silent --show-error --fail --max-time 8 -K - \
    -H "Title: portaria: $alert_kind on $alert_endpoint" \
    -H "Priority: $priority" -H "Tags: $tags" \
    --data-raw "$alert_message" >/dev/null
