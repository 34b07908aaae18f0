#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 30): `fuzz/run.sh [SECONDS]`.
#
# Builds the targets first (cargo-fuzz, libFuzzer; `RUSTC_BOOTSTRAP=1` lets the stable
# toolchain take the nightly flags). Each run starts from the committed seeds (corpus/TARGET,
# read only) plus what earlier runs found (target/fuzz-corpus/TARGET, not committed). A crash
# stops the script with a non-zero status; its input is in artifacts/TARGET/ (README.md says
# how to reproduce it and keep it). At the end, one line per target: executions and exec/s.
#
# Environment: FUZZ_TARGETS (space-separated, default all), FUZZ_ARGS (more libFuzzer flags,
# e.g. `-fork=2` to use both cores).
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
cd "$(dirname "$0")"

SECONDS_EACH=${1:-30}
TARGETS=${FUZZ_TARGETS:-verify_all dedup_extract describe route config_parse verify_capture}
export RUSTC_BOOTSTRAP=1
# Safe Rust: no sanitizer (panics are what these look for, and it doubles the speed); debug
# assertions on, so an integer overflow is a crash here rather than a wrapped value.
BUILD_FLAGS=(--sanitizer none --debug-assertions)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 2
fi

cargo fuzz build "${BUILD_FLAGS[@]}"

summary=()
for target in $TARGETS; do
    work="target/fuzz-corpus/$target"
    mkdir -p "$work" "artifacts/$target"
    flags=(-max_total_time="$SECONDS_EACH" -timeout=10 -print_final_stats=1)
    [[ -f "dict/$target.dict" ]] && flags+=(-dict="dict/$target.dict")
    [[ $target == config_parse ]] && flags+=(-max_len=16384)
    log="target/fuzz-$target.log"
    echo "== fuzz $target (${SECONDS_EACH} s)"
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    if ! cargo fuzz run "${BUILD_FLAGS[@]}" "$target" "$work" "corpus/$target" -- \
        "${flags[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1; then
        tail -n 60 "$log"
        echo "fuzz $target: CRASH (input in fuzz/artifacts/$target/, log in fuzz/$log)" >&2
        exit 1
    fi
    runs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
    rate=$(awk '/^stat::average_exec_per_sec:/ { print $2 }' "$log" | tail -n 1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 || true)
    summary+=("$(printf '%-15s %12s runs %8s exec/s  %s' "$target" "${runs:-?}" "${rate:-?}" "$cov")")
done
echo "== fuzz summary (${SECONDS_EACH} s each)"
printf '%s\n' "${summary[@]}"
