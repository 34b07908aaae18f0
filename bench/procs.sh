# bench/procs.sh: what every bench script shares, sourced at its top (after `set -euo
# pipefail`): `log`, and the processes it starts, stops (`stop_pid`) and waits for
# (`wait_for_addr`). Each one started is appended to PIDS and
# stopped on exit (SIGTERM, up to 10 s, then SIGKILL); WORK, the script's temporary
# directory, is removed on exit unless a correctness check missed (MISSES > 0) or KEEP=1.

log() { printf '\n== %s\n' "$*" >&2; }

PIDS=()
WORK=""
MISSES=0

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ $MISSES -eq 0 && ${KEEP:-0} != 1 ]]; then
            rm -rf "$WORK"
        else
            echo "bench: kept $WORK for inspection" >&2
        fi
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Drops a process from PIDS once the script has stopped it itself.
forget_pid() {
    local keep=() pid
    for pid in "${PIDS[@]}"; do
        [[ $pid == "$1" ]] || keep+=("$pid")
    done
    PIDS=("${keep[@]}")
}

# Waits for a process the script started (WHAT names it) and forgets it; a non-zero status is
# a correctness miss and ends the run.
wait_ok() {
    local pid=$1 what=$2 rc=0
    wait "$pid" || rc=$?
    forget_pid "$pid"
    if [[ $rc -ne 0 ]]; then
        echo "bench: $what failed with status $rc" >&2
        MISSES=$((MISSES + 1))
        exit 1
    fi
}

# Stops a process we started: SIGTERM, up to 20 s, then SIGKILL. Sets STOP_RC.
stop_pid() {
    local pid=$1 name=$2
    STOP_RC=0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "bench: $name did not stop within 20 s of SIGTERM; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        STOP_RC=124
    fi
    local rc=0
    wait "$pid" 2>/dev/null || rc=$?
    if [[ $STOP_RC -eq 0 ]]; then
        STOP_RC=$rc
    fi
    forget_pid "$pid"
}

# Waits for `listening addr=` in a log; sets ADDR.
wait_for_addr() {
    local pid=$1 logfile=$2 name=$3
    ADDR=""
    for _ in $(seq 200); do
        ADDR=$(grep -o 'listening addr=[0-9.:]*' "$logfile" 2>/dev/null | head -n1 | cut -d= -f2 || true)
        [[ -n $ADDR ]] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "bench: $name exited during start-up:" >&2
            cat "$logfile" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "bench: $name did not report its address within 20 s" >&2
    cat "$logfile" >&2
    exit 1
}
