#!/usr/bin/env bash
# bench/run.sh: portaria's benchmark and its correctness checks, in one command (issue 5).
#
#   bench/run.sh            full run: 20,000 requests, concurrency 32, 20 % duplicates,
#                           1 % bad signatures; plus 10 s at 1,000 req/s and 10 s of idle CPU
#   bench/run.sh --quick    smoke run: 3,000 requests, no paced run, no idle-CPU window
#   bench/run.sh --store postgres [--quick]
#                           the PostgreSQL backend, one and two instances: bench/pg.sh
#
# What it does, all on loopback, with temporary databases:
#   1. builds release (portaria and bench/loadgen);
#   2. intake: starts portaria, samples idle RSS, runs the load, samples peak RSS, CPU time and
#      bytes written (/proc/PID/io write_bytes), the database and WAL size, and checks that every
#      acknowledged event is stored exactly once with its exact body, that duplicates and bad
#      signatures are stored zero times, and that nothing got a 5xx or no answer;
#   3. (full) the same against a fresh portaria at 1,000 req/s open loop, for the p99 there;
#   4. ceiling: the same load against bench/loadgen's bare hyper server (in full mode also
#      paced at 1,000 req/s, the floor under portaria's paced p99); in full mode, two more
#      rounds of intake (each checked) and ceiling, alternating: throughput, p99 and the share
#      of the ceiling are reported as medians over the three rounds (CPU, disk and RSS come
#      from the first);
#   5. forwarding to a command: every acknowledged event delivered and seen by the command;
#      the per-event overhead is portaria's delivery rate against the command run alone;
#   6. forwarding to a local HTTP target (the bare server, recording what it receives);
#   7. a table of every figure next to its target, and bench/results/latest.json (a full run;
#      a quick run writes bench/results/quick.json, so a smoke run never replaces the figures
#      docs/performance.md quotes).
#
# Exits non-zero on any correctness miss, never on speed. Every process it starts is stopped on
# exit. The temporary directory is removed unless a check failed (or KEEP=1).
#
# Disk figures need the temporary directory on a real disk (not tmpfs): set TMPDIR if needed.
# portaria's log goes through a pipe, so its per-request log lines are not counted as its
# disk writes (under systemd they are journald's).

set -euo pipefail

MODE=full
STORE=sqlite
usage() {
    echo "usage: bench/run.sh [--quick] [--store sqlite|postgres]" >&2
    exit 2
}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) MODE=quick ;;
        --store=*) STORE=${1#--store=} ;;
        --store)
            [[ $# -ge 2 ]] || usage
            STORE=$2
            shift
            ;;
        *) usage ;;
    esac
    shift
done
[[ $STORE == sqlite || $STORE == postgres ]] || usage
# The PostgreSQL backend has a run of its own (one and two instances on one database).
if [[ $STORE == postgres ]]; then
    exec "$(dirname "${BASH_SOURCE[0]}")/pg.sh" "$MODE"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

if [[ $MODE == quick ]]; then
    REQUESTS=3000
    FORWARD_REQUESTS=500
    ROUNDS=1
else
    REQUESTS=20000
    FORWARD_REQUESTS=2000
    # Intake and ceiling are measured this many times, alternating, and reported as medians:
    # one noisy moment on a shared machine then moves a figure less.
    ROUNDS=3
fi
CONCURRENCY=32
DUP_RATIO=0.2
BAD_RATIO=0.01
PACED_RATE=1000
PACED_SECS=10
IDLE_SECS=10
FORWARD_LANES=4
DELIVERY_WAIT_SECS=60
SECRET=bench-pagarme-secret
ENDPOINT_PATH=/webhooks/pagarme

# shellcheck source=bench/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
now_ms() { date +%s%3N; }

# ---- /proc readings ----

CLK_TCK=$(getconf CLK_TCK)
proc_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# utime + stime in clock ticks (fields 14 and 15; the name in parentheses may hold spaces).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# portaria serve is not dumpable (src/hardening.rs): its /proc/PID/io is root's to read.
write_bytes() {
    awk '$1 == "write_bytes:" { print $2 }' "/proc/$1/io" || {
        echo "bench: cannot read /proc/$1/io: run the bench as root for the disk figures" >&2
        return 1
    }
}
file_bytes() { if [[ -f $1 ]]; then stat -c %s "$1"; else echo 0; fi; }

metric() { echo "$1 $2" >>"$WORK/metrics.txt"; }

# ---- portaria and its config ----

# write_config DIR [EXTRA_ENDPOINT_LINES]
write_config() {
    cat >"$1/portaria.toml" <<EOF
# Written by bench/run.sh.
[server]
listen = "127.0.0.1:0"

[storage]
path = "$1/portaria.db"

[[endpoint]]
name = "pagarme"
path = "$ENDPOINT_PATH"
provider = "pagarme"
secret = "$SECRET"
${2:-}
EOF
}

# start_portaria DIR: sets PORTARIA_PID and ADDR.
start_portaria() {
    local dir=$1
    # Let the previous phase's write-back reach the disk first, so that each phase's latencies
    # (and fsync stalls) are its own.
    sync
    # stderr through a pipe: log lines are not portaria's disk writes (see the header).
    RUST_LOG=${RUST_LOG:-info} "$ROOT/target/release/portaria" serve --config "$dir/portaria.toml" \
        2> >(exec cat >"$dir/portaria.log") &
    PORTARIA_PID=$!
    PIDS+=("$PORTARIA_PID")
    wait_for_addr "$PORTARIA_PID" "$dir/portaria.log" portaria
}

stop_portaria() {
    stop_pid "$PORTARIA_PID" portaria
    if [[ $STOP_RC -ne 0 ]]; then
        echo "CORRECTNESS MISS [$1]: portaria exited with status $STOP_RC on SIGTERM" >&2
        metric shutdown_misses "[$1] portaria exited with status $STOP_RC on SIGTERM"
        MISSES=$((MISSES + 1))
    fi
}

# start_bare DIR [--record FILE]: sets BARE_PID and ADDR.
start_bare() {
    local dir=$1
    shift
    "$ROOT/target/release/bare-server" "$@" 2>"$dir/bare-server.log" &
    BARE_PID=$!
    PIDS+=("$BARE_PID")
    wait_for_addr "$BARE_PID" "$dir/bare-server.log" bare-server
}

# run_loadgen LABEL URL REQUESTS [extra loadgen args...]: report in $WORK/LABEL.json.
run_loadgen() {
    local label=$1 url=$2 requests=$3
    shift 3
    "$ROOT/target/release/loadgen" --label "$label" --url "$url" --secret "$SECRET" \
        --provider pagarme --requests "$requests" --concurrency "$CONCURRENCY" \
        --dup-ratio "$DUP_RATIO" --bad-sig-ratio "$BAD_RATIO" --max-secs 60 --timeout-secs 10 \
        --json-out "$WORK/$label.json" "$@" >/dev/null &
    local pid=$!
    PIDS+=("$pid")
    wait_ok "$pid" "loadgen ($label)"
}

check() {
    python3 "$ROOT/bench/check.py" "$@" || MISSES=$((MISSES + 1))
}

# ---- 1. build ----

log "building release"
cargo build --release -p portaria -p loadgen

WORK=$(mktemp -d "${TMPDIR:-/tmp}/portaria-bench.XXXXXX")
: >"$WORK/metrics.txt"
FS_TYPE=$(stat -f -c %T "$WORK")
if [[ $FS_TYPE == tmpfs ]]; then
    echo "bench: warning: $WORK is on tmpfs; disk write figures will read 0 (set TMPDIR)" >&2
fi
metric mode "$MODE"
metric command "bench/run.sh${1:+ $1}"
metric machine "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r), $FS_TYPE"
metric clk_tck "$CLK_TCK"
metric binary_bytes "$(file_bytes "$ROOT/target/release/portaria")"
metric requests "$REQUESTS"
metric concurrency "$CONCURRENCY"

# ---- 2. durable intake ----

log "intake: $REQUESTS requests, concurrency $CONCURRENCY, duplicates $DUP_RATIO, bad signatures $BAD_RATIO"
D="$WORK/intake"
mkdir -p "$D"
write_config "$D"
start_portaria "$D"
sleep 2
metric idle_rss_kib "$(proc_kib "$PORTARIA_PID" VmRSS)"
CPU0=$(cpu_ticks "$PORTARIA_PID")
IO0=$(write_bytes "$PORTARIA_PID")
run_loadgen intake "http://$ADDR$ENDPOINT_PATH" "$REQUESTS" \
    --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
metric peak_rss_kib "$(proc_kib "$PORTARIA_PID" VmHWM)"
metric intake_cpu_ticks "$(($(cpu_ticks "$PORTARIA_PID") - CPU0))"
metric intake_write_bytes "$(($(write_bytes "$PORTARIA_PID") - IO0))"
metric intake_db_bytes "$(file_bytes "$D/portaria.db")"
metric intake_wal_bytes "$(file_bytes "$D/portaria.db-wal")"
if [[ $MODE == full ]]; then
    log "idle: CPU time over $IDLE_SECS s after the load"
    CPU1=$(cpu_ticks "$PORTARIA_PID")
    sleep "$IDLE_SECS"
    metric idle_cpu_ticks "$(($(cpu_ticks "$PORTARIA_PID") - CPU1))"
    metric idle_cpu_window_secs "$IDLE_SECS"
    metric rss_after_load_kib "$(proc_kib "$PORTARIA_PID" VmRSS)"
fi
stop_portaria intake
metric intake_db_bytes_closed "$(file_bytes "$D/portaria.db")"
check intake "$D/portaria.db" "$WORK/intake.json" "$D/acked.txt" "$D/bad.txt" "$WORK/check-intake.json"

# ---- 3. p99 at 1,000 req/s (full mode) ----

if [[ $MODE == full ]]; then
    PACED_REQUESTS=$((PACED_RATE * PACED_SECS))
    log "paced: $PACED_REQUESTS requests at $PACED_RATE req/s, open loop"
    D="$WORK/paced"
    mkdir -p "$D"
    write_config "$D"
    start_portaria "$D"
    sleep 1
    PACED_IO0=$(write_bytes "$PORTARIA_PID")
    run_loadgen paced "http://$ADDR$ENDPOINT_PATH" "$PACED_REQUESTS" --rate "$PACED_RATE" \
        --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
    # At this rate most commits hold one event: what a quiet shop's disk sees per webhook.
    metric paced_write_bytes "$(($(write_bytes "$PORTARIA_PID") - PACED_IO0))"
    metric paced_accepted "$(wc -l <"$D/acked.txt")"
    stop_portaria paced
    check intake "$D/portaria.db" "$WORK/paced.json" "$D/acked.txt" "$D/bad.txt" "$WORK/check-paced.json"
fi

# ---- 4. the ceiling: a bare hyper server under the same load ----

log "ceiling: the same load against a bare hyper server"
D="$WORK/ceiling"
mkdir -p "$D"
start_bare "$D"
run_loadgen ceiling "http://$ADDR$ENDPOINT_PATH" "$REQUESTS"
if [[ $MODE == full ]]; then
    # The floor of the paced figure: what loopback, hyper and loadgen add on their own.
    log "ceiling, paced: $PACED_REQUESTS requests at $PACED_RATE req/s against the bare server"
    run_loadgen ceiling-paced "http://$ADDR$ENDPOINT_PATH" "$PACED_REQUESTS" --rate "$PACED_RATE"
fi
stop_pid "$BARE_PID" bare-server

# ---- 4b. (full) more rounds of intake and ceiling, alternating, for the medians ----

for ((ROUND = 2; ROUND <= ROUNDS; ROUND++)); do
    log "round $ROUND of $ROUNDS: intake, then the ceiling"
    D="$WORK/intake-$ROUND"
    mkdir -p "$D"
    write_config "$D"
    start_portaria "$D"
    run_loadgen "intake-$ROUND" "http://$ADDR$ENDPOINT_PATH" "$REQUESTS" \
        --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
    stop_portaria "intake-$ROUND"
    check intake "$D/portaria.db" "$WORK/intake-$ROUND.json" "$D/acked.txt" "$D/bad.txt" \
        "$WORK/check-intake-$ROUND.json"
    D="$WORK/ceiling-$ROUND"
    mkdir -p "$D"
    start_bare "$D"
    run_loadgen "ceiling-$ROUND" "http://$ADDR$ENDPOINT_PATH" "$REQUESTS"
    stop_pid "$BARE_PID" bare-server
done

# delivery_rate DB SINCE_MS VERDICT_JSON: deliveries/s.
# Uses the attempts that started after the load ended, when no load competes for the CPU, if
# there are enough of them; otherwise every attempt.
delivery_rate() {
    local db=$1 since=$2 verdict=$3
    read -r count first last _ < <(python3 "$ROOT/bench/check.py" window "$db" "$since")
    if [[ $count -lt 50 ]]; then
        read -r count first last < <(python3 -c '
import json, sys
f = json.load(open(sys.argv[1]))["facts"]
print(f["attempts"] or 0, f["first_attempt_ms"] or 0, f["last_attempt_end_ms"] or 0)' "$verdict")
    fi
    python3 -c 'import sys; n, a, b = map(int, sys.argv[1:4]); print(f"{n / max(b - a, 1) * 1000:.3f}")' \
        "$count" "$first" "$last"
}

# ---- 5. forwarding to a command ----

log "forwarding to a command: $FORWARD_REQUESTS requests, $FORWARD_LANES deliveries at once"
D="$WORK/command"
mkdir -p "$D"
cat >"$D/on-event.sh" <<EOF
#!/bin/sh
# Written by bench/run.sh: note which event arrived and the SHA-256 of the body read.
HASH=\$(sha256sum | cut -c1-64)
printf '%s %s %s\n' "\$PORTARIA_EVENT_ID" "\$PORTARIA_DEDUP_KEY" "\$HASH" >>"\${BENCH_SEEN:-$D/seen.txt}"
EOF
chmod +x "$D/on-event.sh"
: >"$D/seen.txt"
write_config "$D" "forward = { command = [\"$D/on-event.sh\"] }
concurrency = $FORWARD_LANES"
start_portaria "$D"
COMMAND_IO0=$(write_bytes "$PORTARIA_PID")
run_loadgen command-load "http://$ADDR$ENDPOINT_PATH" "$FORWARD_REQUESTS" \
    --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
LOAD_END=$(now_ms)
DELIVERY_IO0=$(write_bytes "$PORTARIA_PID")
check delivered "$D/portaria.db" "$D/acked.txt" "$WORK/check-command.json" \
    --wait "$DELIVERY_WAIT_SECS" --seen-ids "$D/seen.txt" --phase command
# What delivering costs the disk (attempt rows, status changes), on top of intake's share.
metric delivery_write_bytes "$(($(write_bytes "$PORTARIA_PID") - DELIVERY_IO0))"
# And everything, intake included, from the first request to the last delivery.
metric command_total_write_bytes "$(($(write_bytes "$PORTARIA_PID") - COMMAND_IO0))"
metric delivered_events "$(wc -l <"$D/acked.txt")"
check intake "$D/portaria.db" "$WORK/command-load.json" "$D/acked.txt" "$D/bad.txt" \
    "$WORK/check-command-intake.json"
RATE=$(delivery_rate "$D/portaria.db" "$LOAD_END" "$WORK/check-command.json")
stop_portaria command
# The command alone, run the same number of times with the same parallelism.
BASE_N=$(wc -l <"$D/acked.txt")
BASE_START=$(now_ms)
seq "$BASE_N" | BENCH_SEEN="$D/baseline.txt" xargs -P "$FORWARD_LANES" -n 1 "$D/on-event.sh"
BASE_MS=$(($(now_ms) - BASE_START))
python3 - "$RATE" "$BASE_N" "$BASE_MS" "$FORWARD_LANES" >>"$WORK/metrics.txt" <<'EOF'
import sys
rate, n, base_ms, lanes = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
base_rate = n / max(base_ms, 1) * 1000
# Each lane spends lanes/rate seconds per event; the command alone needs lanes/base_rate.
overhead_ms = (lanes / rate - lanes / base_rate) * 1000 if rate > 0 else float("nan")
print(f"command_deliveries_per_sec {rate:.3f}")
print(f"command_baseline_per_sec {base_rate:.3f}")
print(f"command_overhead_ms {overhead_ms:.4f}")
EOF

# ---- 5b. two command routes ----

log "two command routes: $FORWARD_REQUESTS requests, each route $FORWARD_LANES deliveries at once"
D="$WORK/routes"
mkdir -p "$D"
cat >"$D/on-event.sh" <<EOF
#!/bin/sh
# Written by bench/run.sh: note which event arrived, per route.
HASH=\$(sha256sum | cut -c1-64)
printf '%s %s %s\n' "\$PORTARIA_EVENT_ID" "\$PORTARIA_DEDUP_KEY" "\$HASH" >>"$D/seen.\$PORTARIA_ROUTE.txt"
EOF
chmod +x "$D/on-event.sh"
: >"$D/seen.erp.txt"
: >"$D/seen.audit.txt"
write_config "$D" "[[endpoint.route]]
name = \"erp\"
events = [\"charge.*\"]
forward = { command = [\"$D/on-event.sh\"] }
concurrency = $FORWARD_LANES

[[endpoint.route]]
name = \"audit\"
forward = { command = [\"$D/on-event.sh\"] }
concurrency = $FORWARD_LANES"
start_portaria "$D"
ROUTES_IO0=$(write_bytes "$PORTARIA_PID")
run_loadgen routes-load "http://$ADDR$ENDPOINT_PATH" "$FORWARD_REQUESTS" \
    --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
check routes "$D/portaria.db" "$D/acked.txt" "$WORK/check-routes.json" \
    --wait "$DELIVERY_WAIT_SECS" --route erp "$D/seen.erp.txt" --route audit "$D/seen.audit.txt"
metric routes_total_write_bytes "$(($(write_bytes "$PORTARIA_PID") - ROUTES_IO0))"
metric routes_delivered_events "$(wc -l <"$D/acked.txt")"
check intake "$D/portaria.db" "$WORK/routes-load.json" "$D/acked.txt" "$D/bad.txt" \
    "$WORK/check-routes-intake.json"
stop_portaria routes

# ---- 6. forwarding to a local HTTP target ----

log "forwarding to a local HTTP target: $FORWARD_REQUESTS requests, $FORWARD_LANES deliveries at once"
D="$WORK/http"
mkdir -p "$D"
start_bare "$D" --record "$D/received.txt"
TARGET_ADDR=$ADDR
TARGET_PID=$BARE_PID
write_config "$D" "forward = { url = \"http://$TARGET_ADDR/\" }
concurrency = $FORWARD_LANES"
start_portaria "$D"
run_loadgen http-load "http://$ADDR$ENDPOINT_PATH" "$FORWARD_REQUESTS" \
    --acked-out "$D/acked.txt" --bad-out "$D/bad.txt"
LOAD_END=$(now_ms)
check delivered "$D/portaria.db" "$D/acked.txt" "$WORK/check-http.json" \
    --wait "$DELIVERY_WAIT_SECS" --seen-keys "$D/received.txt" --phase http
check intake "$D/portaria.db" "$WORK/http-load.json" "$D/acked.txt" "$D/bad.txt" \
    "$WORK/check-http-intake.json"
metric http_deliveries_per_sec "$(delivery_rate "$D/portaria.db" "$LOAD_END" "$WORK/check-http.json")"
stop_portaria http
stop_pid "$TARGET_PID" bare-server

# ---- 7. summary ----

metric finished_at "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
mkdir -p "$ROOT/bench/results"
log "summary ($MODE)"
RESULTS="$ROOT/bench/results/latest.json"
[[ $MODE == quick ]] && RESULTS="$ROOT/bench/results/quick.json"
python3 "$ROOT/bench/check.py" summary "$WORK" "$MODE" "$RESULTS" ||
    MISSES=$((MISSES + 1))
echo "results: ${RESULTS#"$ROOT/"}" >&2
if [[ $MISSES -ne 0 ]]; then
    echo "bench: correctness misses: see above" >&2
    exit 1
fi
