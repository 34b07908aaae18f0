#!/usr/bin/env bash
# Prove that packaging/check-debs.sh can fail: from one good package, make broken copies (each
# with one thing wrong) and a tighter bound, and require check-debs.sh to reject each one with
# the reason. A check that passed everything would pass CI too; this is what stops that.
#
#   packaging/test-check-debs.sh target/debian/portaria_*_arm64.deb
#
# Needs no root: the copies are repacked with dpkg-deb --root-owner-group.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
# The packages as given, from wherever this is run; then the checkout's root.
if (($#)); then
    packages=()
    for arg in "$@"; do packages+=("$(realpath -m -- "$arg")"); done
    set -- "${packages[@]}"
fi
cd "$(dirname "$0")/.."

(($# == 1)) || {
    echo "usage: packaging/test-check-debs.sh PACKAGE.deb (one that check-debs.sh accepts)" >&2
    exit 2
}
GOOD=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VERSION=$(dpkg-deb --field "$GOOD" Version)
ARCH=$(dpkg-deb --field "$GOOD" Architecture)
PASSED=0
FAILED=0

# expect_rejected NAME REASON [VAR=value...] -- PACKAGE: check-debs.sh must exit non-zero and say REASON.
expect_rejected() {
    local name=$1 reason=$2
    shift 2
    local env=()
    while [[ $1 != -- ]]; do
        env+=("$1")
        shift
    done
    shift
    local out rc=0
    out=$(env "${env[@]}" bash packaging/check-debs.sh "$1" 2>&1) || rc=$?
    if ((rc != 0)) && grep -q -F -- "$reason" <<<"$out"; then
        echo "ok   $name: rejected ($(grep -F FAIL <<<"$out" | sed 's/^ *FAIL [^:]*: //'))"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL $name: check-debs.sh exited $rc without '$reason':" >&2
        sed 's/^/    /' <<<"$out" >&2
        FAILED=$((FAILED + 1))
    fi
}

# broken NAME NEW_ARCH EDIT: a copy of the good package with EDIT run in its unpacked tree
# (the binary in usr/bin, the control files in DEBIAN), named for NEW_ARCH; prints its path.
broken() {
    local name=$1 arch=$2 edit=$3 tree="$WORK/$1"
    dpkg-deb --raw-extract "$GOOD" "$tree"
    (cd "$tree" && eval "$edit")
    mkdir -p "$WORK/out-$name"
    local deb="$WORK/out-$name/portaria_${VERSION}_$arch.deb"
    dpkg-deb --root-owner-group -Zgzip -z1 --build "$tree" "$deb" >/dev/null
    echo "$deb"
}

echo "== the good package passes"
bash packaging/check-debs.sh "$GOOD" >/dev/null || {
    echo "FAIL the good package $GOOD does not pass check-debs.sh" >&2
    exit 1
}
echo "ok   $GOOD passes"

echo "== tighter bounds fail"
expect_rejected "a 4 MB size budget" "over the budget" MAX_BINARY_BYTES=4000000 -- "$GOOD"
expect_rejected "glibc 2.17 as the oldest supported" "newer than 2.17" OLDEST_GLIBC=2.17 -- "$GOOD"

echo "== broken packages fail"
for other in amd64 arm64 armhf; do
    [[ $other == "$ARCH" ]] && continue
    expect_rejected "the $ARCH binary labelled $other" "(for $other)" -- \
        "$(broken "as-$other" "$other" "sed -i 's/^Architecture: .*/Architecture: $other/' DEBIAN/control")"
done
expect_rejected "Depends without a libc6 version" "Depends does not say libc6" -- \
    "$(broken no-libc6 "$ARCH" "sed -i 's/^Depends: .*/Depends: libgcc-s1/' DEBIAN/control")"
expect_rejected "Depends older than the glibc the binary needs" "but the binary needs glibc" -- \
    "$(broken old-libc6 "$ARCH" "sed -i 's/^Depends: .*/Depends: libc6 (>= 2.17), libgcc-s1/' DEBIAN/control")"
expect_rejected "a unit that is not packaging/portaria.service" "differs from packaging/portaria.service" -- \
    "$(broken unit "$ARCH" "echo '# edited' >> usr/lib/systemd/system/portaria.service")"
expect_rejected "no Pi guide" "lacks /usr/share/doc/portaria/raspberry-pi.md" -- \
    "$(broken no-guide "$ARCH" "rm usr/share/doc/portaria/raspberry-pi.md")"
expect_rejected "no conffile" "no conffiles list" -- \
    "$(broken no-conffile "$ARCH" "rm DEBIAN/conffiles")"
expect_rejected "a secrets file in the package" "ships a portaria.env" -- \
    "$(broken env-file "$ARCH" "echo SECRET=x > etc/portaria/portaria.env")"

if ((FAILED)); then
    echo "test-check-debs: check-debs.sh let $FAILED of $((PASSED + FAILED)) wrong packages or bounds through" >&2
    exit 1
fi
echo "test-check-debs: check-debs.sh rejected each of the $PASSED wrong packages and bounds"
