#!/usr/bin/env bash
# bench/pg.sh: the PostgreSQL backend's benchmark, run by `bench/run.sh --store postgres`
# (`--quick` for a smoke run). Same workload as bench/run.sh (pagarme webhooks, concurrency 32
# per load generator, 20 % duplicates, 1 % bad signatures), on loopback:
#   1. starts a throwaway PostgreSQL from the system's binaries (Debian: postgresql-15), as the
#      tests do: initdb into the temporary directory, a free loopback port, trust
#      authentication, fsync on; as `nobody` when run as root;
#   2. intake, one instance: one load generator;
#   3. intake, two instances on the same database: two load generators at once, one per
#      instance (different seeds, half the requests each); the figure is the sum;
#   4. forwarding to a command with two instances: every acknowledged event delivered, each
#      seen by the command, none twice without a failed attempt to explain it.
# Each phase has a database of its own; its correctness checks are bench/check.py's, on a
# SQLite snapshot of it (bench/pg_snapshot.py). Writes bench/results/postgres.json (full) or
# postgres-quick.json; exits non-zero on any correctness miss, never on speed.
# PORTARIA_BIN=PATH runs that portaria binary instead of the one built here (A/B runs of two
# builds under the same conditions).

set -euo pipefail

MODE=${1:-full}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ $MODE == quick ]]; then
    REQUESTS=3000
    FORWARD_REQUESTS=500
else
    REQUESTS=20000
    FORWARD_REQUESTS=2000
fi
CONCURRENCY=32
DUP_RATIO=0.2
BAD_RATIO=0.01
FORWARD_LANES=4
DELIVERY_WAIT_SECS=60
SECRET=bench-pagarme-secret
ENDPOINT_PATH=/webhooks/pagarme

# shellcheck source=bench/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/procs.sh"

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
for tool in initdb postgres pg_isready; do
    if [[ -z $PG_BIN || ! -x $PG_BIN/$tool ]]; then
        echo "bench: PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql-15)" >&2
        exit 1
    fi
done
PSQL=$PG_BIN/psql

# As `nobody` when root (initdb refuses root).
as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u nobody -- "$@"
    else
        "$@"
    fi
}

PORTARIA=${PORTARIA_BIN:-$ROOT/target/release/portaria}
log "building release"
if [[ -n ${PORTARIA_BIN:-} ]]; then
    cargo build --release -p loadgen
else
    cargo build --release -p portaria -p loadgen
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/portaria-bench-pg.XXXXXX")
chmod 755 "$WORK"
mkdir "$WORK/pg"
[[ $(id -u) -eq 0 ]] && chown nobody "$WORK/pg"

log "PostgreSQL: $PG_BIN"
as_owner "$PG_BIN/initdb" -D "$WORK/pg/data" -U portaria -A trust -E UTF8 >/dev/null
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_owner "$PG_BIN/postgres" -D "$WORK/pg/data" -p "$PORT" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories= -c max_connections=200 2>"$WORK/pg/postgres.log" &
PIDS+=("$!")
for _ in $(seq 300); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U portaria && break
    sleep 0.1
done
PG_VERSION=$("$PSQL" -X -At -h 127.0.0.1 -p "$PORT" -U portaria -d postgres -c 'SHOW server_version')
url() { echo "postgres://portaria@127.0.0.1:$PORT/$1"; }
new_db() { "$PSQL" -X -q -h 127.0.0.1 -p "$PORT" -U portaria -d postgres -c "CREATE DATABASE $1"; }

# write_config DIR DB [EXTRA_ENDPOINT_LINES]
write_config() {
    cat >"$1/portaria.toml" <<TOML
# Written by bench/pg.sh.
[server]
listen = "127.0.0.1:0"
admin_listen = "off"

[storage]
url = "$(url "$2")"

[[endpoint]]
name = "pagarme"
path = "$ENDPOINT_PATH"
provider = "pagarme"
secret = "$SECRET"
${3:-}
TOML
}

# start_portaria DIR NAME: sets PORTARIA_PID and ADDR.
start_portaria() {
    local dir=$1 name=$2
    RUST_LOG=${RUST_LOG:-warn,portaria=info} "$PORTARIA" serve \
        --config "$dir/portaria.toml" 2> >(exec cat >"$dir/$name.log") &
    PORTARIA_PID=$!
    PIDS+=("$PORTARIA_PID")
    wait_for_addr "$PORTARIA_PID" "$dir/$name.log" "portaria ($name)"
}

stop_portaria() {
    stop_pid "$1" portaria
    if [[ $STOP_RC -ne 0 ]]; then
        echo "CORRECTNESS MISS: portaria exited with status $STOP_RC on SIGTERM" >&2
        MISSES=$((MISSES + 1))
    fi
}

# loadgen LABEL URL REQUESTS SEED DIR: in the background; sets LOADGEN_PID.
loadgen() {
    "$ROOT/target/release/loadgen" --label "$1" --url "$2" --secret "$SECRET" \
        --provider pagarme --requests "$3" --seed "$4" --concurrency "$CONCURRENCY" \
        --dup-ratio "$DUP_RATIO" --bad-sig-ratio "$BAD_RATIO" --max-secs 120 --timeout-secs 10 \
        --json-out "$WORK/$1.json" --acked-out "$5/acked-$1.txt" --bad-out "$5/bad-$1.txt" \
        >/dev/null 2>"$5/loadgen-$1.log" &
    LOADGEN_PID=$!
    PIDS+=("$LOADGEN_PID")
}

wait_loadgen() { wait_ok "$1" "a load generator"; }

# merge OUT LABEL REPORTS...: one loadgen report for several run at once (counts summed,
# throughput over the longest run) for check.py.
merge() {
    python3 - "$@" <<'PY'
import json, sys
out, label, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
reports = [json.load(open(p)) for p in paths]
def add(a, b):
    for k, v in b.items():
        if isinstance(v, dict):
            add(a.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            a[k] = a.get(k, 0) + v
    return a
merged = {"label": label, "status": {}, "by_kind": {}, "expected": {}}
for r in reports:
    add(merged["status"], r["status"])
    add(merged["by_kind"], r["by_kind"])
    add(merged["expected"], r["expected"])
merged["first_errors"] = sum((r.get("first_errors") or [] for r in reports), [])
secs = max(r["elapsed_secs"] for r in reports)
merged["elapsed_secs"] = secs
merged["throughput_rps"] = round(sum(r["requests"]["answered"] for r in reports) / secs, 3)
merged["latency_ms"] = [r["latency_ms"] for r in reports]
json.dump(merged, open(out, "w"), indent=2)
PY
}

check() {
    python3 "$ROOT/bench/check.py" "$@" || MISSES=$((MISSES + 1))
}

snapshot() { python3 "$ROOT/bench/pg_snapshot.py" "$PSQL" "$(url "$1")" "$2"; }

# ---- intake, one instance ----

log "intake, one instance: $REQUESTS requests, concurrency $CONCURRENCY"
D="$WORK/pg1"
mkdir -p "$D"
new_db pg1
write_config "$D" pg1
start_portaria "$D" portaria
loadgen pg-intake-1 "http://$ADDR$ENDPOINT_PATH" "$REQUESTS" 1 "$D"
wait_loadgen "$LOADGEN_PID"
stop_portaria "$PORTARIA_PID"
snapshot pg1 "$D/snapshot.db"
check intake "$D/snapshot.db" "$WORK/pg-intake-1.json" "$D/acked-pg-intake-1.txt" \
    "$D/bad-pg-intake-1.txt" "$WORK/check-pg-intake-1.json"

# ---- intake, two instances on one database ----

HALF=$((REQUESTS / 2))
log "intake, two instances: $HALF requests to each at once, concurrency $CONCURRENCY each"
D="$WORK/pg2"
mkdir -p "$D"
new_db pg2
write_config "$D" pg2
start_portaria "$D" a
A_PID=$PORTARIA_PID A_ADDR=$ADDR
start_portaria "$D" b
B_PID=$PORTARIA_PID B_ADDR=$ADDR
loadgen pg-intake-2a "http://$A_ADDR$ENDPOINT_PATH" "$HALF" 1 "$D"
LA=$LOADGEN_PID
loadgen pg-intake-2b "http://$B_ADDR$ENDPOINT_PATH" "$HALF" 2 "$D"
LB=$LOADGEN_PID
wait_loadgen "$LA"
wait_loadgen "$LB"
stop_portaria "$A_PID"
stop_portaria "$B_PID"
cat "$D/acked-pg-intake-2a.txt" "$D/acked-pg-intake-2b.txt" >"$D/acked.txt"
cat "$D/bad-pg-intake-2a.txt" "$D/bad-pg-intake-2b.txt" >"$D/bad.txt"
merge "$WORK/pg-intake-2.json" pg-intake-2 "$WORK/pg-intake-2a.json" "$WORK/pg-intake-2b.json"
snapshot pg2 "$D/snapshot.db"
check intake "$D/snapshot.db" "$WORK/pg-intake-2.json" "$D/acked.txt" "$D/bad.txt" \
    "$WORK/check-pg-intake-2.json"

# ---- forwarding to a command, two instances ----

log "forwarding to a command, two instances: $FORWARD_REQUESTS requests, $FORWARD_LANES deliveries at once each"
D="$WORK/pgf"
mkdir -p "$D"
new_db pgf
cat >"$D/on-event.sh" <<SH
#!/bin/sh
# Written by bench/pg.sh: which event arrived and the SHA-256 of the body read.
HASH=\$(sha256sum | cut -c1-64)
printf '%s %s %s\n' "\$PORTARIA_EVENT_ID" "\$PORTARIA_DEDUP_KEY" "\$HASH" >>"$D/seen.txt"
SH
chmod +x "$D/on-event.sh"
: >"$D/seen.txt"
write_config "$D" pgf "forward = { command = [\"$D/on-event.sh\"] }
concurrency = $FORWARD_LANES"
start_portaria "$D" a
A_PID=$PORTARIA_PID A_ADDR=$ADDR
start_portaria "$D" b
B_PID=$PORTARIA_PID B_ADDR=$ADDR
loadgen pg-forward-a "http://$A_ADDR$ENDPOINT_PATH" $((FORWARD_REQUESTS / 2)) 1 "$D"
LA=$LOADGEN_PID
loadgen pg-forward-b "http://$B_ADDR$ENDPOINT_PATH" $((FORWARD_REQUESTS / 2)) 2 "$D"
LB=$LOADGEN_PID
wait_loadgen "$LA"
wait_loadgen "$LB"
cat "$D/acked-pg-forward-a.txt" "$D/acked-pg-forward-b.txt" >"$D/acked.txt"
cat "$D/bad-pg-forward-a.txt" "$D/bad-pg-forward-b.txt" >"$D/bad.txt"
FORWARD_START=$(date +%s%3N)
for _ in $(seq $((DELIVERY_WAIT_SECS * 5))); do
    LEFT=$("$PSQL" -X -At -d "$(url pgf)" -c "SELECT count(*) FROM events WHERE status <> 'delivered'")
    [[ $LEFT -eq 0 ]] && break
    sleep 0.2
done
FORWARD_SECS=$(python3 -c "import sys; print(($(date +%s%3N) - $FORWARD_START) / 1000)")
stop_portaria "$A_PID"
stop_portaria "$B_PID"
merge "$WORK/pg-forward.json" pg-forward "$WORK/pg-forward-a.json" "$WORK/pg-forward-b.json"
snapshot pgf "$D/snapshot.db"
check intake "$D/snapshot.db" "$WORK/pg-forward.json" "$D/acked.txt" "$D/bad.txt" \
    "$WORK/check-pg-forward-intake.json"
check delivered "$D/snapshot.db" "$D/acked.txt" "$WORK/check-pg-forward.json" --wait 0 \
    --seen-ids "$D/seen.txt" --phase pg-forward

# ---- summary ----

mkdir -p "$ROOT/bench/results"
RESULTS="$ROOT/bench/results/postgres.json"
[[ $MODE == quick ]] && RESULTS="$ROOT/bench/results/postgres-quick.json"
python3 - "$WORK" "$MODE" "$RESULTS" "$PG_VERSION" "$FORWARD_SECS" <<'PY'
import json, os, sys
work, mode, out, version, forward_secs = sys.argv[1:6]
def load(name):
    return json.load(open(os.path.join(work, name)))
one, two = load("pg-intake-1.json"), load("pg-intake-2.json")
halves = [load("pg-intake-2a.json"), load("pg-intake-2b.json")]
checks = {n: load(f"check-{n}.json") for n in
          ("pg-intake-1", "pg-intake-2", "pg-forward-intake", "pg-forward")}
fwd = checks["pg-forward"]["facts"]
rows = [
    ("intake, one instance", one["throughput_rps"], one["latency_ms"]["p50"], one["latency_ms"]["p99"]),
] + [
    (f"intake, two instances: {h['label']}", h["throughput_rps"], h["latency_ms"]["p50"], h["latency_ms"]["p99"])
    for h in halves
] + [("intake, two instances together", two["throughput_rps"], None, None)]
print(f"\nPostgreSQL {version}, {mode} mode, {os.cpu_count()} cores, loopback", file=sys.stderr)
print(f"{'phase':<48} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}", file=sys.stderr)
for name, rps, p50, p99 in rows:
    f = lambda x: "-" if x is None else f"{x:.1f}"
    print(f"{name:<48} {rps:>9.0f} {f(p50):>8} {f(p99):>8}", file=sys.stderr)
print(f"forwarding, two instances: {fwd['delivered']} of {fwd['acked_unique']} delivered, "
      f"{fwd['redeliveries']} redeliveries, {float(forward_secs):.1f} s after the load",
      file=sys.stderr)
for name, c in checks.items():
    print(f"check {name}: {'ok' if c['ok'] else 'MISS'}", file=sys.stderr)
json.dump({"mode": mode, "postgres": version, "intake_one": one, "intake_two": two,
           "intake_two_each": halves, "checks": checks,
           "forward_wait_secs": float(forward_secs)}, open(out, "w"), indent=2)
PY
echo "results: ${RESULTS#"$ROOT/"}" >&2
if [[ $MISSES -ne 0 ]]; then
    echo "bench: correctness misses: see above" >&2
    exit 1
fi
