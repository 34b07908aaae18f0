#!/bin/sh
# portaria alert command: mails each alert through the local sendmail (postfix, msmtp, nullmailer,
# ... any that provides `sendmail -t`).
#
#   [alerts]
#   command = ["/usr/local/lib/portaria/sendmail.sh"]
#
# Environment (systemd: in the unit's EnvironmentFile, e.g. /etc/portaria/portaria.env):
#   MAIL_TO    where alerts go, e.g. ops@example.com (required)
#   MAIL_FROM  the sender (optional; sendmail's default otherwise)
#   SENDMAIL   the sendmail program (default: sendmail on PATH, then /usr/sbin/sendmail)
# Needs python3. The alert's JSON is on stdin; exits non-zero if sendmail failed, so portaria
# logs the failure and tries again at its next tick.
set -eu
: "${MAIL_TO:?set MAIL_TO to the address alerts go to}"
sendmail=${SENDMAIL:-$(command -v sendmail || echo /usr/sbin/sendmail)}

json=$(cat)
eval "$(printf '%s' "$json" | python3 -c '
import json, shlex, sys
a = json.load(sys.stdin)
for k in ("kind", "endpoint", "message", "time"):
    # One line each: nothing in a header may start a new one.
    v = " ".join(str(a.get(k) or "").split())
    print("alert_%s=%s" % (k, shlex.quote(v)))
')"

{
    printf 'To: %s\n' "$MAIL_TO"
    if [ -n "${MAIL_FROM:-}" ]; then
        printf 'From: %s\n' "$MAIL_FROM"
    fi
    printf 'Subject: portaria: %s on %s\n' "$alert_kind" "$alert_endpoint"
    printf 'Content-Type: text/plain; charset=utf-8\n\n'
    printf '%s\n\n%s\n\nThe alert as portaria sent it:\n%s\n' "$alert_message" "$alert_time" "$json"
} | "$sendmail" -t -i
