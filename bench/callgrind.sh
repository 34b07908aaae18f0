#!/usr/bin/env bash
# bench/callgrind.sh: instructions per accepted webhook, whole process, counted by valgrind's
# callgrind (issue 17). Instruction counts barely move between runs on a noisy shared machine,
# where req/s and CPU seconds move by ±15 %: this is the figure to A/B a change with.
#
#   bench/callgrind.sh                 2,000 requests, concurrency 8 (the fixed load)
#   REQUESTS=500 bench/callgrind.sh    a quicker look (figures not comparable with 2,000)
#   NO_BUILD=1 bench/callgrind.sh      measure the release build as it is
#   CARGO_TARGET_DIR=/tmp/t ...        build and measure there (e.g. a build with symbols)
#
# What it does, on loopback with a temporary database (TMPDIR: on a real disk, as run.sh):
#   1. builds release (portaria and bench/loadgen);
#   2. starts portaria under `valgrind --tool=callgrind` (every thread counted);
#   3. once portaria listens, dumps its start-up's counts, sends the load with bench/loadgen (the mix
#      of run.sh: 20 % duplicates, 1 % bad signatures, signed bodies of 800-1,000 bytes),
#      dumps the counters, then stops portaria (SIGTERM) and checks every acknowledged event
#      is stored exactly once (bench/check.py);
#   4. prints Ir (instructions) of the load window and of the whole process (start-up and
#      shutdown included), each divided by the number of accepted events, and writes
#      bench/results/callgrind.json.
#
# Keeps the callgrind files with KEEP=1 (for `callgrind_annotate`; build with
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only CARGO_PROFILE_RELEASE_STRIP=false for names).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

REQUESTS=${REQUESTS:-2000}
CONCURRENCY=${CONCURRENCY:-8}
SECRET=bench-pagarme-secret
ENDPOINT_PATH=/webhooks/pagarme

command -v valgrind >/dev/null || {
    echo "bench: valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
}

if [[ ${NO_BUILD:-0} != 1 ]]; then
    cargo build --release -p portaria -p loadgen >&2
fi

BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release

WORK=$(mktemp -d "${TMPDIR:-/tmp}/portaria-callgrind.XXXXXX")
PORTARIA_PID=""
cleanup() {
    if [[ -n $PORTARIA_PID ]] && kill -0 "$PORTARIA_PID" 2>/dev/null; then
        kill -KILL "$PORTARIA_PID" 2>/dev/null || true
    fi
    if [[ ${KEEP:-0} == 1 || ${FAILED:-0} == 1 ]]; then
        echo "bench: kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

cat >"$WORK/portaria.toml" <<EOF
# Written by bench/callgrind.sh.
[server]
listen = "127.0.0.1:0"
# Not measured, and 9464 may be taken by another portaria on the machine.
admin_listen = "off"

[storage]
path = "$WORK/portaria.db"

[[endpoint]]
name = "pagarme"
path = "$ENDPOINT_PATH"
provider = "pagarme"
secret = "$SECRET"
EOF

RUST_LOG=${RUST_LOG:-info} valgrind --tool=callgrind \
    --callgrind-out-file="$WORK/callgrind.out.%p" --log-file="$WORK/valgrind.log" \
    "$BIN/portaria" serve --config "$WORK/portaria.toml" \
    2> >(exec cat >"$WORK/portaria.log") &
PORTARIA_PID=$!

ADDR=""
for _ in $(seq 600); do
    ADDR=$(grep -o 'listening addr=[0-9.:]*' "$WORK/portaria.log" 2>/dev/null | head -n1 | cut -d= -f2 || true)
    [[ -n $ADDR ]] && break
    kill -0 "$PORTARIA_PID" 2>/dev/null || break
    sleep 0.1
done
if [[ -z $ADDR ]]; then
    FAILED=1
    echo "bench: portaria under valgrind did not start" >&2
    cat "$WORK/portaria.log" "$WORK/valgrind.log" >&2
    exit 1
fi

# The load window: counters dumped (and so reset) after start-up, and again after the last
# answer; the file written at exit holds the shutdown.
callgrind_control --dump=startup "$PORTARIA_PID" >/dev/null 2>&1
"$BIN/loadgen" --label callgrind --url "http://$ADDR$ENDPOINT_PATH" \
    --secret "$SECRET" --provider pagarme --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --dup-ratio 0.2 --bad-sig-ratio 0.01 --max-secs 600 --timeout-secs 60 \
    --json-out "$WORK/loadgen.json" --acked-out "$WORK/acked.txt" --bad-out "$WORK/bad.txt" \
    >/dev/null 2>"$WORK/loadgen.log"
callgrind_control --dump=load "$PORTARIA_PID" >/dev/null 2>&1

kill -TERM "$PORTARIA_PID"
RC=0
wait "$PORTARIA_PID" || RC=$?
PORTARIA_PID=""
if [[ $RC -ne 0 ]]; then
    FAILED=1
    echo "bench: portaria exited with status $RC on SIGTERM" >&2
    exit 1
fi
if ! python3 "$ROOT/bench/check.py" intake "$WORK/portaria.db" "$WORK/loadgen.json" \
    "$WORK/acked.txt" "$WORK/bad.txt" "$WORK/check.json" >&2; then
    FAILED=1
    exit 1
fi

# callgrind's files: one per dump (`.1` start-up, `.2` the load window), the last at exit;
# each has one `summary:` line (its Ir, every thread together).
summary() { awk '/^summary:/ { s += $2 } END { print s + 0 }' "$@"; }
LOAD_IR=$(summary "$WORK"/callgrind.out.*.2)
TOTAL_IR=$(summary "$WORK"/callgrind.out.*)
ACCEPTED=$(wc -l <"$WORK/acked.txt")

mkdir -p "$ROOT/bench/results"
python3 - "$LOAD_IR" "$TOTAL_IR" "$ACCEPTED" "$REQUESTS" "$CONCURRENCY" \
    "$ROOT/bench/results/callgrind.json" <<'EOF'
import json, sys
load_ir, total_ir, accepted, requests, concurrency = map(int, sys.argv[1:6])
result = {
    "requests": requests,
    "concurrency": concurrency,
    "accepted": accepted,
    "load_ir": load_ir,
    "total_ir": total_ir,
    "load_ir_per_accepted": round(load_ir / accepted),
    "total_ir_per_accepted": round(total_ir / accepted),
}
json.dump(result, open(sys.argv[6], "w"), indent=2)
print(f"requests {requests}, concurrency {concurrency}, accepted {accepted}")
print(f"load window: {load_ir:,} Ir = {load_ir / accepted:,.0f} Ir per accepted webhook")
print(f"whole run:   {total_ir:,} Ir = {total_ir / accepted:,.0f} Ir per accepted webhook")
EOF
