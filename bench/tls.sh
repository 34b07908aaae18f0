#!/usr/bin/env bash
# bench/tls.sh: intake throughput over HTTPS next to plain HTTP (issue 16), same load, same
# machine, each run checked by bench/check.py as in bench/run.sh.
#
#   bench/tls.sh            20,000 requests per run, concurrency 32, 20 % duplicates, 1 % bad
#   REQUESTS=3000 ROUNDS=1 bench/tls.sh
#
# ROUNDS (3) rounds of two fresh portarias, one after the other: `[server] tls` off, then on
# (a CA and a P-256 server certificate made here with the openssl binary); the figures are
# the medians over the rounds, since one noisy moment on a shared machine moves one run a lot. loadgen opens every keep-alive
# connection before the clock starts, so each connection's TLS handshake happens once, outside
# the measured time; the figure is the cost of TLS on the requests themselves. Writes
# bench/results/tls.json. Exits non-zero on a correctness miss, never on speed.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
REQUESTS=${REQUESTS:-20000}
ROUNDS=${ROUNDS:-3}
CONCURRENCY=32
SECRET=bench-pagarme-secret
ENDPOINT_PATH=/webhooks/pagarme

# shellcheck source=bench/procs.sh
source "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/portaria-bench-tls.XXXXXX")

command -v openssl >/dev/null || { echo "bench/tls.sh needs the openssl binary (for the test certificate)" >&2; exit 2; }
cargo build --release -p portaria -p loadgen

# A CA and a server certificate for 127.0.0.1, as a real deployment has a chain.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=portaria bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$WORK/server.key" -out "$WORK/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 2 -extfile "$WORK/ext.cnf" -out "$WORK/server.pem" 2>/dev/null

# run MODE LABEL (MODE: plain | tls): one fresh portaria, one loadgen run, one check.
run() {
    local mode=$1 label=$2 d="$WORK/$2" tls="" scheme=http ca=()
    mkdir -p "$d"
    if [[ $mode == tls ]]; then
        tls="tls = { cert_file = \"$WORK/server.pem\", key_file = \"$WORK/server.key\" }"
        scheme=https
        ca=(--ca "$WORK/ca.pem")
    fi
    cat >"$d/portaria.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "off"
$tls
[storage]
path = "$d/portaria.db"
[[endpoint]]
name = "pagarme"
path = "$ENDPOINT_PATH"
provider = "pagarme"
secret = "$SECRET"
TOML
    sync
    "$ROOT/target/release/portaria" serve --config "$d/portaria.toml" 2> >(exec cat >"$d/portaria.log") &
    local pid=$!
    PIDS+=("$pid")
    local addr=""
    for _ in $(seq 200); do
        addr=$(grep -o 'listening addr=[0-9.:]*' "$d/portaria.log" 2>/dev/null | head -n1 | cut -d= -f2 || true)
        [[ -n $addr ]] && break
        sleep 0.1
    done
    [[ -n $addr ]] || { cat "$d/portaria.log" >&2; exit 1; }
    "$ROOT/target/release/loadgen" --label "$label" --url "$scheme://$addr$ENDPOINT_PATH" "${ca[@]}" \
        --secret "$SECRET" --provider pagarme --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
        --dup-ratio 0.2 --bad-sig-ratio 0.01 --max-secs 60 --timeout-secs 10 \
        --json-out "$WORK/$label.json" --acked-out "$d/acked.txt" --bad-out "$d/bad.txt" >/dev/null
    kill -TERM "$pid"
    wait "$pid" || true
    python3 "$ROOT/bench/check.py" intake "$d/portaria.db" "$WORK/$label.json" "$d/acked.txt" \
        "$d/bad.txt" "$WORK/check-$label.json" || MISSES=$((MISSES + 1))
}

for round in $(seq "$ROUNDS"); do
    run plain "plain-$round"
    run tls "tls-$round"
done
python3 - "$WORK" "$ROUNDS" "$REQUESTS" "$ROOT/bench/results/tls.json" <<'PY'
import json, os, platform, statistics, sys
work, rounds, requests, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
result = {"machine": f"{os.cpu_count()} cores, {cpu}, Linux {platform.release()}",
          "requests_per_run": requests, "rounds": rounds, "modes": {}}
for mode in ("plain", "tls"):
    runs = [json.load(open(f"{work}/{mode}-{r}.json")) for r in range(1, rounds + 1)]
    rps = [r["throughput_rps"] for r in runs]
    p99 = [r["latency_ms"]["p99"] for r in runs]
    result["modes"][mode] = {"throughput_rps_median": statistics.median(rps), "throughput_rps": rps,
                             "p99_ms_median": statistics.median(p99), "p99_ms": p99}
    print(f"{mode:>5}: median {statistics.median(rps):8.0f} req/s (runs {', '.join(f'{x:.0f}' for x in rps)}), "
          f"median p99 {statistics.median(p99)} ms", file=sys.stderr)
json.dump(result, open(out, "w"), indent=2)
PY
[[ $MISSES -eq 0 ]]
