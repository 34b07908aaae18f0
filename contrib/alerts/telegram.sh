#!/bin/sh
# portaria alert command: sends each alert as a Telegram message from your bot.
#
#   [alerts]
#   command = ["/usr/local/lib/portaria/telegram.sh"]
#
# Environment (systemd: in the unit's EnvironmentFile, e.g. /etc/portaria/portaria.env):
#   TELEGRAM_BOT_TOKEN  the token @BotFather gave you, 123456:ABC-... (required)
#   TELEGRAM_CHAT_ID    the chat to write to: yours, or a group's (required)
#   TELEGRAM_API        the Bot API's base URL (default https://api.telegram.org)
# Needs curl and python3. The alert's JSON is on stdin; exits non-zero if Telegram refused it,
# so portaria logs the failure and tries again at its next tick.
set -eu
: "${TELEGRAM_BOT_TOKEN:?set TELEGRAM_BOT_TOKEN to your bot token}"
: "${TELEGRAM_CHAT_ID:?set TELEGRAM_CHAT_ID to the chat to send to}"
api=${TELEGRAM_API:-https://api.telegram.org}

body=$(python3 -c '
import json, sys
a = json.load(sys.stdin)
text = "portaria: %s on %s\n%s" % (a.get("kind"), a.get("endpoint"), a.get("message"))
print(json.dumps({"chat_id": sys.argv[1], "text": text, "disable_web_page_preview": True}))
' "$TELEGRAM_CHAT_ID")

# The URL holds the token: it goes to curl on its stdin (-K -), never on its command line.
printf 'url = "%s/bot%s/sendMessage"\n' "$api" "$TELEGRAM_BOT_TOKEN" |
    curl --silent --show-error --fail --max-time 8 -K - \
        -H "Content-Type: application/json" --data-raw "$body" >/dev/null
