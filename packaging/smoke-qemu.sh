#!/usr/bin/env bash
# Run the binary of each arm64 or armhf package on this PC under qemu-user, as a smoke test of
# what packaging/check-debs.sh only reads: `--version`, `check`, `serve`, a signed webhook
# answered 200 (and a forged one 401), its forward to a command, `events list`, SIGTERM.
#
#   packaging/smoke-qemu.sh target/debian/portaria_*_arm64.deb target/debian/portaria_*_armhf.deb
#
# The CPU is the oldest each package is for: a Cortex-A53 (Pi 3, Zero 2) for arm64, a Cortex-A7
# (Pi 2) for armhf, so an instruction those cores lack fails here.
#
# The guest's glibc comes from Debian's multiarch packages (libc6:arm64, libc6:armhf, installed
# with libstd-rust-web-dev for the build), loader and libc.so.6 from the same build: qemu runs
# without -L, and the binary's loader (/lib/ld-linux-aarch64.so.1) finds its libraries through
# the multiarch paths. `qemu-aarch64 -L /usr/aarch64-linux-gnu` would take the loader from
# libc6-arm64-cross (another build of glibc) while the loader still finds libc.so.6 in
# /lib/aarch64-linux-gnu through /etc/ld.so.cache: with the two mixed, the first pthread_create
# loops forever, which is how every threaded guest seemed to hang (packaging/README.md, "Running
# the ARM packages under qemu").
#
# Needs qemu-user (Debian 12's 7.2; installed as root if missing). Exits 1 naming the step that failed.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
# The packages as given, from wherever this is run; then the checkout's root.
if (($#)); then
    packages=()
    for arg in "$@"; do packages+=("$(realpath -m -- "$arg")"); done
    set -- "${packages[@]}"
fi
cd "$(dirname "$0")/.."

SECRET=smoke-secret-0123456789abcdef0123456789
WORK=$(mktemp -d)
SERVE_PID=
cleanup() {
    if [[ -n $SERVE_PID ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -KILL "$SERVE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

ok() { printf '  ok   %s\n' "$*"; }
fail() {
    printf '  FAIL %s: %s\n' "${DEB:-smoke-qemu}" "$*" >&2
    exit 1
}
# eventually SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds, for at most SECONDS.
eventually() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

(($#)) || fail "usage: packaging/smoke-qemu.sh PACKAGE.deb..."
if ! command -v qemu-aarch64 >/dev/null || ! command -v qemu-arm >/dev/null; then
    ((EUID == 0)) || fail "qemu-user is missing: sudo apt-get install --no-install-recommends qemu-user"
    echo "smoke-qemu: apt-get install qemu-user"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
fi

smoke_one() {
    DEB=$1
    local arch dir qemu loader
    arch=$(dpkg-deb --field "$DEB" Architecture)
    case $arch in
    arm64) qemu=(qemu-aarch64 -cpu cortex-a53) loader=/lib/ld-linux-aarch64.so.1 ;;
    armhf) qemu=(qemu-arm -cpu cortex-a7) loader=/lib/ld-linux-armhf.so.3 ;;
    *) fail "Architecture $arch: this runs arm64 and armhf packages" ;;
    esac
    printf '== %s under %s (%s)\n' "$DEB" "${qemu[*]}" "$("${qemu[0]}" --version | head -n 1)"
    [[ -e $loader ]] || fail "$loader is missing: libc6:$arch (build-debs.sh installs it with libstd-rust-web-dev:$arch)"
    dir="$WORK/$arch"
    mkdir -p "$dir/events" "$dir/partial"
    dpkg-deb --extract "$DEB" "$dir/root"
    local bin="$dir/root/usr/bin/portaria"
    # The guest's loader and libraries: the multiarch ones, never a -L prefix (see the top).
    # Each command gets 120 s: a guest that hangs fails the smoke instead of stalling CI.
    run() { timeout 120 env -u QEMU_LD_PREFIX -u LD_LIBRARY_PATH "SMOKE_SECRET=$SECRET" "${qemu[@]}" "$bin" "$@"; }

    local version
    version=$(run --version) || fail "portaria --version failed (exit $?)"
    ok "--version: $version"

    cat >"$dir/on-payment" <<EOF
#!/bin/sh
# The forward: keep the body under the event's id.
cat >"$dir/partial/\$PORTARIA_EVENT_ID" && mv "$dir/partial/\$PORTARIA_EVENT_ID" "$dir/events/"
EOF
    chmod 755 "$dir/on-payment"
    cat >"$dir/portaria.toml" <<EOF
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "$dir/portaria.db"

[[endpoint]]
name = "pagarme"
path = "/webhooks/pagarme"
provider = "pagarme"
secret_env = "SMOKE_SECRET"
forward = { command = ["$dir/on-payment"], timeout_secs = 60 }
EOF
    run check --config "$dir/portaria.toml" >"$dir/check.out" 2>&1 ||
        fail "portaria check failed (exit $?; 124: it ran for 120 s): $(cat "$dir/check.out")"
    ok "check: $(tail -n 1 "$dir/check.out")"

    : >"$dir/serve.log"
    # exec: the background job is qemu itself, so SIGTERM reaches it (qemu passes it to portaria).
    (exec env -u QEMU_LD_PREFIX -u LD_LIBRARY_PATH "SMOKE_SECRET=$SECRET" "${qemu[@]}" "$bin" \
        serve --config "$dir/portaria.toml") >"$dir/serve.log" 2>&1 &
    SERVE_PID=$!
    listening() {
        kill -0 "$SERVE_PID" 2>/dev/null || fail "portaria serve exited: $(cat "$dir/serve.log")"
        grep -q ' listening addr=' "$dir/serve.log"
    }
    eventually 120 listening || fail "portaria serve did not listen within 120 s: $(cat "$dir/serve.log")"
    local addr admin
    addr=$(sed -n 's/.* listening addr=\([0-9.:]*\) .*/\1/p' "$dir/serve.log")
    admin=$(sed -n 's/.* listening .* admin=\([0-9.:]*\) .*/\1/p' "$dir/serve.log")
    [[ -n $addr && -n $admin ]] || fail "could not read the addresses from: $(grep listening "$dir/serve.log")"
    ready() {
        local answer
        answer=$( (exec 3<>"/dev/tcp/${admin%:*}/${admin##*:}" &&
            printf 'GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3 &&
            head -n 1 <&3) 2>/dev/null) && [[ $answer == *" 200 "* ]]
    }
    eventually 60 ready || fail "/readyz on $admin did not answer 200"
    ok "serve: webhooks on $addr, /readyz on $admin answers 200"

    local body='{"id":"smoke_1","type":"order.paid","data":{"amount":1990}}'
    run send --config "$dir/portaria.toml" --endpoint pagarme --url "http://$addr/webhooks/pagarme" \
        --data "$body" >"$dir/send.out" 2>&1 || fail "portaria send failed: $(cat "$dir/send.out")"
    grep -q '^1/1: 200 ' "$dir/send.out" || fail "the signed webhook was not answered 200: $(cat "$dir/send.out")"
    ok "a signed webhook: $(grep '^1/1:' "$dir/send.out")"
    if SECRET="not-$SECRET" run send --config "$dir/portaria.toml" --endpoint pagarme \
        --url "http://$addr/webhooks/pagarme" --data '{"id":"forged","type":"order.paid"}' >"$dir/forged.out" 2>&1 ||
        ! grep -q '^1/1: 401 ' "$dir/forged.out"; then
        fail "a webhook signed with another secret was not answered 401: $(cat "$dir/forged.out")"
    fi
    ok "a webhook signed with another secret: $(grep '^1/1:' "$dir/forged.out")"

    forwarded() { compgen -G "$dir/events/*" >/dev/null; }
    eventually 120 forwarded || fail "the event was not forwarded to the command within 120 s: $(cat "$dir/serve.log")"
    local got
    got=$(cat "$dir"/events/*)
    [[ $got == "$body" ]] || fail "the command got '$got', not the signed body"
    ok "forwarded to the command: the signed body, byte for byte"
    delivered() {
        run events list --config "$dir/portaria.toml" >"$dir/events.out" 2>&1 &&
            grep -q -E 'pagarme +delivered' "$dir/events.out"
    }
    eventually 60 delivered || fail "events list does not show the event delivered: $(cat "$dir/events.out")"
    ok "events list: $(grep -E 'pagarme +delivered' "$dir/events.out" | tr -s ' ')"

    kill -TERM "$SERVE_PID"
    stopped() { ! kill -0 "$SERVE_PID" 2>/dev/null; }
    eventually 60 stopped || fail "portaria serve did not stop within 60 s of SIGTERM"
    local rc=0
    wait "$SERVE_PID" || rc=$?
    SERVE_PID=
    ((rc == 0)) || fail "portaria serve exited $rc after SIGTERM: $(cat "$dir/serve.log")"
    ok "SIGTERM: serve stopped, exit 0"
    grep -q -F "$SECRET" "$dir"/*.out "$dir/serve.log" && fail "the secret's value appears in portaria's output"
    DEB=
}

for deb in "$@"; do
    start=$SECONDS
    smoke_one "$deb"
    echo "  ($((SECONDS - start)) s)"
done
echo "smoke-qemu: $# package(s) ran check, serve, a signed webhook and its forward"
