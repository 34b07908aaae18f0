#!/usr/bin/env bash
# bench/backlog.sh: what one delivery costs while a backlog drains (issue 27, "A backlog drains
# at a constant cost per event").
#
#   bench/backlog.sh [--store sqlite|postgres] [--pending 1000,10000,100000] [--measure 1000]
#
# For each backlog size N, on loopback with a temporary database (SQLite in a temporary
# directory, or, with `--store postgres`, a throwaway PostgreSQL started as bench/pg.sh does):
#   1. portaria starts once to create the database and stops; the route is paused (`portaria
#      route pause`) and portaria starts again, so nothing drains;
#   2. bench/loadgen posts N unique signed webhooks through the real intake path (no duplicates,
#      no bad signatures): N events wait;
#   3. `portaria route resume`: the running server (concurrency 1, strict order, a command
#      target that only reads its body) drains the backlog;
#   4. once M deliveries are finished (M = --measure, at most N/2), the server is stopped and
#      the cost per event is read from the database: the span between the first and the M-th
#      delivery's `finished_at`, divided by M - 1 (the drain's own clock, not the script's).
# Prints ms per event at each N and its ratio to the first N; writes bench/results/backlog-STORE.json.
# A drain that cannot reach M within MAX_DRAIN_SECS (300) is reported with what it reached.
# Compare ratios within one run: this machine is shared and noisy. PORTARIA_BIN=PATH runs that
# binary instead of the one built here (A/B runs of two builds). KEEP=1 keeps the directory.

set -euo pipefail

STORE=sqlite
PENDING=1000,10000,100000
MEASURE=1000
usage() {
    echo "usage: bench/backlog.sh [--store sqlite|postgres] [--pending N,N,...] [--measure M]" >&2
    exit 2
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --store) [[ $# -ge 2 ]] || usage; STORE=$2; shift ;;
        --pending) [[ $# -ge 2 ]] || usage; PENDING=$2; shift ;;
        --measure) [[ $# -ge 2 ]] || usage; MEASURE=$2; shift ;;
        *) usage ;;
    esac
    shift
done
[[ $STORE == sqlite || $STORE == postgres ]] || usage
[[ $MEASURE =~ ^[0-9]+$ && $MEASURE -ge 2 ]] || usage
MAX_DRAIN_SECS=${MAX_DRAIN_SECS:-300}
SECRET=bench-pagarme-secret
ENDPOINT_PATH=/webhooks/pagarme

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench/procs.sh
source "$ROOT/bench/procs.sh"

PORTARIA=${PORTARIA_BIN:-$ROOT/target/release/portaria}
log "building release"
if [[ -n ${PORTARIA_BIN:-} ]]; then
    cargo build --release -p loadgen
else
    cargo build --release -p portaria -p loadgen
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/portaria-backlog.XXXXXX")
chmod 755 "$WORK"
cat >"$WORK/on-event.sh" <<'EOF'
#!/bin/sh
# Written by bench/backlog.sh: the trivial target, it reads the body and succeeds.
exec cat >/dev/null
EOF
chmod 755 "$WORK/on-event.sh"

if [[ $STORE == postgres ]]; then
    PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
    if [[ -z $PG_BIN || ! -x $PG_BIN/initdb ]]; then
        echo "bench: PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql-15)" >&2
        exit 1
    fi
    as_owner() { if [[ $(id -u) -eq 0 ]]; then runuser -u nobody -- "$@"; else "$@"; fi; }
    mkdir "$WORK/pg"
    [[ $(id -u) -eq 0 ]] && chown nobody "$WORK/pg"
    as_owner "$PG_BIN/initdb" -D "$WORK/pg/data" -U portaria -A trust -E UTF8 >/dev/null
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_owner "$PG_BIN/postgres" -D "$WORK/pg/data" -p "$PORT" -c listen_addresses=127.0.0.1 \
        -c unix_socket_directories= 2>"$WORK/pg/postgres.log" &
    PIDS+=("$!")
    for _ in $(seq 300); do
        "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U portaria && break
        sleep 0.1
    done
    psql_at() { "$PG_BIN/psql" -X -At -h 127.0.0.1 -p "$PORT" -U portaria -d "$1" -c "$2"; }
fi

# sql DIR QUERY: one value from the phase's database.
sql() {
    if [[ $STORE == postgres ]]; then
        psql_at "$(basename "$1")" "$2"
    else
        python3 -c 'import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print(c.execute(sys.argv[2]).fetchone()[0])' "$1/portaria.db" "$2"
    fi
}

# write_config DIR
write_config() {
    local storage="path = \"$1/portaria.db\""
    [[ $STORE == postgres ]] && storage="url = \"postgres://portaria@127.0.0.1:$PORT/$(basename "$1")\""
    cat >"$1/portaria.toml" <<TOML
# Written by bench/backlog.sh.
[server]
listen = "127.0.0.1:0"
admin_listen = "off"

[storage]
$storage

[[endpoint]]
name = "pagarme"
path = "$ENDPOINT_PATH"
provider = "pagarme"
secret = "$SECRET"
forward = { command = ["$WORK/on-event.sh"] }
concurrency = 1
TOML
}

# start_portaria DIR NAME: sets PORTARIA_PID and ADDR (its log, DIR/NAME.log, holds only
# warnings and the address).
start_portaria() {
    RUST_LOG=warn,portaria::server=info "$PORTARIA" serve --config "$1/portaria.toml" \
        2> >(exec cat >"$1/$2.log") &
    PORTARIA_PID=$!
    PIDS+=("$PORTARIA_PID")
    wait_for_addr "$PORTARIA_PID" "$1/$2.log" portaria
}

RESULTS=()
for N in ${PENDING//,/ }; do
    M=$((MEASURE < N / 2 ? MEASURE : N / 2))
    D="$WORK/backlog_$N"
    mkdir -p "$D"
    [[ $STORE == postgres ]] && psql_at postgres "CREATE DATABASE backlog_$N" >/dev/null
    write_config "$D"
    # The first start creates the database; the route is paused before the second.
    start_portaria "$D" create
    stop_pid "$PORTARIA_PID" portaria
    "$PORTARIA" route pause --config "$D/portaria.toml" --endpoint pagarme --reason bench 2>>"$D/cli.log"
    start_portaria "$D" portaria

    log "N=$N: seeding $N events through intake (the route is paused)"
    SEED0=$(date +%s%3N)
    "$ROOT/target/release/loadgen" --label "seed-$N" --url "http://$ADDR$ENDPOINT_PATH" \
        --secret "$SECRET" --provider pagarme --requests "$N" --concurrency 32 \
        --dup-ratio 0 --bad-sig-ratio 0 --max-secs 1200 --timeout-secs 30 \
        --json-out "$D/seed.json" >/dev/null 2>"$D/loadgen.log" &
    LOADGEN_PID=$!
    PIDS+=("$LOADGEN_PID")
    wait_ok "$LOADGEN_PID" "loadgen (seed $N)"
    SEED_MS=$(($(date +%s%3N) - SEED0))
    STORED=$(sql "$D" "SELECT count(*) FROM deliveries WHERE status = 'pending'")
    echo "seeded: $STORED pending in $((SEED_MS / 1000)) s" >&2

    log "N=$N: draining; measuring the first $M deliveries"
    "$PORTARIA" route resume --config "$D/portaria.toml" --endpoint pagarme 2>>"$D/cli.log"
    DRAIN0=$(date +%s)
    while :; do
        DONE=$(sql "$D" "SELECT count(*) FROM deliveries WHERE status = 'delivered'")
        [[ $DONE -ge $M ]] && break
        if (($(date +%s) - DRAIN0 > MAX_DRAIN_SECS)); then
            echo "bench: only $DONE of $M delivered after $MAX_DRAIN_SECS s" >&2
            break
        fi
        sleep 0.5
    done
    stop_pid "$PORTARIA_PID" portaria
    # The first M deliveries in the order they finished: (last - first) / (count - 1).
    FIGURE=$(sql "$D" "SELECT count(*) || ' ' || ((max(f) - min(f)) * 1.0 / (count(*) - 1)) FROM \
        (SELECT finished_at AS f FROM deliveries WHERE status = 'delivered' \
         ORDER BY finished_at LIMIT $M) AS firsts")
    read -r COUNT MS <<<"$FIGURE"
    printf 'N=%s: %.3f ms per event over %s deliveries (seeding took %s s)\n' \
        "$N" "$MS" "$COUNT" "$((SEED_MS / 1000))" >&2
    RESULTS+=("$N $COUNT $MS $STORED $SEED_MS")
    [[ $STORE == postgres ]] && psql_at postgres "DROP DATABASE backlog_$N" >/dev/null
    [[ ${KEEP:-0} == 1 ]] || rm -f "$D"/portaria.db*
done

mkdir -p "$ROOT/bench/results"
OUT="$ROOT/bench/results/backlog-$STORE.json"
printf '%s\n' "${RESULTS[@]}" | python3 -c '
import json, sys, subprocess
rows = [line.split() for line in sys.stdin if line.strip()]
base = float(rows[0][2]) if rows else 0
out = {"store": sys.argv[1], "binary": sys.argv[2], "machine": sys.argv[3], "runs": []}
print("\n%8s %8s %9s %8s" % ("pending", "measured", "ms/event", "vs first"), file=sys.stderr)
for n, count, ms, stored, seed_ms in rows:
    ratio = float(ms) / base if base else float("nan")
    print(f"{n:>8} {count:>8} {float(ms):9.3f} {ratio:8.2f}", file=sys.stderr)
    out["runs"].append({"pending": int(n), "measured": int(count), "ms_per_event": float(ms),
                        "ratio_to_first": ratio, "stored_pending": int(stored), "seed_ms": int(seed_ms)})
json.dump(out, open(sys.argv[4], "w"), indent=2)
' "$STORE" "$PORTARIA" "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$OUT"
echo "results: ${OUT#"$ROOT/"}" >&2
