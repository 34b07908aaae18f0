#!/usr/bin/env bash
# Build portaria's Debian packages for amd64 (a PC or server), arm64 (64-bit Raspberry Pi OS:
# Pi 3, 4, 5, Zero 2) and armhf (32-bit Raspberry Pi OS, Pi 2 and later), on one Debian 12
# machine, with Debian's own packages only: Debian's Rust (rustc-web, cargo-web) with its
# standard library for each architecture (libstd-rust-web-dev:arm64, :armhf, installed through
# multiarch), Debian's cross C compilers (ring and the bundled SQLite are C and assembly) and
# cargo-deb, which reads what goes into the package from Cargo.toml's [package.metadata.deb].
#
#   packaging/build-debs.sh                        # all three, into target/debian/
#   packaging/build-debs.sh --arch arm64           # only the 64-bit Pi's
#   packaging/build-debs.sh --arch arm64 --arch armhf --out dist/
#
# Run as root, it installs what is missing with apt-get (and adds the foreign architectures with
# `dpkg --add-architecture`); otherwise it prints the commands to run and stops. Nothing is
# configured for Cargo on disk: the cross linker and C compiler go in this script's environment
# (CARGO_TARGET_<TRIPLE>_LINKER, CC_<triple>, AR_<triple>), so a plain `cargo build` is unchanged.
# Debian's cargo and rustc are called by their paths (/usr/bin), so a rustup toolchain earlier on
# PATH is neither used nor changed; the builds go to their own target directory, target/debs/.
#
# Each package is checked afterwards without running it (packaging/check-debs.sh: fields,
# contents, ELF machine and ABI, glibc needed, size). packaging/README.md, "Packages for amd64,
# arm64 and armhf", has the requirements and the times measured.
#
# --reuse-release-build: package this machine's own architecture from target/release/portaria as
# it is (built by `cargo build --release --locked` with the cargo on PATH), instead of building it
# again with Debian's toolchain. For CI, where the benchmark has just built it.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
cd "$(dirname "$0")/.."

# cargo-deb's version, pinned: it writes the control file and lays out the package.
CARGO_DEB_VERSION=3.8.0
DEBIAN_CARGO=/usr/bin/cargo
DEBIAN_RUSTC=/usr/bin/rustc

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit "${1:-0}"
}
say() { printf 'build-debs: %s\n' "$*"; }
die() {
    printf 'build-debs: %s\n' "$*" >&2
    exit 1
}

ARCHES=()
OUT=target/debian
REUSE=
while (($#)); do
    case $1 in
    --arch)
        [[ $# -ge 2 ]] || die "--arch needs amd64, arm64 or armhf"
        ARCHES+=("$2")
        shift 2
        ;;
    --arch=*)
        ARCHES+=("${1#--arch=}")
        shift
        ;;
    --out)
        [[ $# -ge 2 ]] || die "--out needs a directory"
        OUT=$2
        shift 2
        ;;
    --reuse-release-build)
        REUSE=1
        shift
        ;;
    -h | --help) usage 0 ;;
    *)
        printf 'build-debs: unknown argument %s\n\n' "$1" >&2
        usage 2 >&2
        ;;
    esac
done
((${#ARCHES[@]})) || ARCHES=(amd64 arm64 armhf)

command -v dpkg >/dev/null || die "this needs a Debian machine (dpkg, apt-get): Debian 12 or a debian:12 container"
HOST=$(dpkg --print-architecture)

# arch -> Rust target, GNU triple (the cross compiler's prefix), cross compiler package.
triple_of() {
    case $1 in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    # Debian's armhf: ARMv7-A, hard float. Not the Pi 1 or first Zero (ARMv6): packaging/README.md.
    armhf) echo armv7-unknown-linux-gnueabihf ;;
    *) die "unknown architecture '$1': amd64, arm64 or armhf" ;;
    esac
}
gnu_of() {
    case $1 in
    amd64) echo x86_64-linux-gnu ;;
    arm64) echo aarch64-linux-gnu ;;
    armhf) echo arm-linux-gnueabihf ;;
    esac
}
for arch in "${ARCHES[@]}"; do triple_of "$arch" >/dev/null; done

# ---- what Debian must provide ----
# python3: check-debs.sh reads Cargo.toml's asset list; ca-certificates: cargo downloads crates.
NEED=(dpkg-dev binutils gcc libc6-dev python3 ca-certificates)
DEBIAN_BUILDS=0 # how many architectures Debian's toolchain builds (not --reuse-release-build's)
for arch in "${ARCHES[@]}"; do
    [[ -n $REUSE && $arch == "$HOST" ]] || DEBIAN_BUILDS=$((DEBIAN_BUILDS + 1))
done
((DEBIAN_BUILDS == 0)) || NEED+=(rustc-web cargo-web)
FOREIGN=()
for arch in "${ARCHES[@]}"; do
    [[ $arch == "$HOST" ]] && continue
    FOREIGN+=("$arch")
    gnu=$(gnu_of "$arch")
    NEED+=("libstd-rust-web-dev:$arch" "gcc-${gnu//_/-}" "libc6-dev-$arch-cross")
done

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }
MISSING_ARCH=()
for arch in "${FOREIGN[@]}"; do
    [[ " $(dpkg --print-foreign-architectures | tr '\n' ' ') " == *" $arch "* ]] || MISSING_ARCH+=("$arch")
done
MISSING=()
for pkg in "${NEED[@]}"; do installed "$pkg" || MISSING+=("$pkg"); done

if ((${#MISSING[@]})); then
    if installed rustup; then
        # rustc-web conflicts with Debian's rustup package: apt would remove it.
        die "Debian's rustup package is installed, and rustc-web conflicts with it (apt would remove it). Build in a debian:12 container, or on a machine without it."
    fi
    if ((EUID != 0)); then
        {
            echo "build-debs: missing Debian packages: ${MISSING[*]}"
            echo "build-debs: install them (as root), then run this again:"
            for arch in "${MISSING_ARCH[@]}"; do echo "    sudo dpkg --add-architecture $arch"; done
            echo "    sudo apt-get update"
            echo "    sudo apt-get install --no-install-recommends ${MISSING[*]}"
        } >&2
        exit 1
    fi
    for arch in "${MISSING_ARCH[@]}"; do
        say "dpkg --add-architecture $arch"
        dpkg --add-architecture "$arch"
    done
    say "apt-get install ${MISSING[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${MISSING[@]}" >/dev/null
fi

# Debian 12's rustc-web is 1.85 in bookworm and newer in bookworm-security; portaria needs its
# rust-version.
if ((DEBIAN_BUILDS)); then
    NEEDED_RUST=$(sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' Cargo.toml)
    HAVE_RUST=$("$DEBIAN_RUSTC" --version | cut -d' ' -f2)
    if ! dpkg --compare-versions "$HAVE_RUST" ge "$NEEDED_RUST"; then
        die "Debian's rustc is $HAVE_RUST; portaria needs $NEEDED_RUST or newer (rustc-web from bookworm-security: add it to the apt sources)"
    fi
    say "$("$DEBIAN_RUSTC" --version) ($DEBIAN_RUSTC)"
fi

# cargo-deb, from crates.io, once (with Debian's cargo if it is there), unless it is installed.
CARGO_DEB=$(command -v cargo-deb || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb")
if ! [[ -x $CARGO_DEB ]] || [[ $("$CARGO_DEB" --version 2>/dev/null | cut -d' ' -f2) != "$CARGO_DEB_VERSION" ]]; then
    say "cargo install cargo-deb@$CARGO_DEB_VERSION --locked"
    if [[ -x $DEBIAN_CARGO && -x $DEBIAN_RUSTC ]]; then
        RUSTC=$DEBIAN_RUSTC "$DEBIAN_CARGO" install --quiet --locked "cargo-deb@$CARGO_DEB_VERSION"
    else
        cargo install --quiet --locked "cargo-deb@$CARGO_DEB_VERSION"
    fi
    CARGO_DEB="${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb"
fi
say "$("$CARGO_DEB" --version)"
mkdir -p "$OUT"

# ---- build ----
# Every architecture that Debian's toolchain builds goes into one cargo invocation (several
# --target): the build scripts and proc-macros, which run on this machine, are compiled once,
# and the two cores share the targets' final (LTO) steps.
ENV=(RUSTC="$DEBIAN_RUSTC" CARGO="$DEBIAN_CARGO" CARGO_TARGET_DIR=target/debs)
TARGETS=()
for arch in "${ARCHES[@]}"; do
    [[ -n $REUSE && $arch == "$HOST" ]] && continue
    triple=$(triple_of "$arch")
    TARGETS+=(--target "$triple")
    if [[ $arch != "$HOST" ]]; then
        gnu=$(gnu_of "$arch")
        upper=$(tr 'a-z-' 'A-Z_' <<<"$triple")
        lower=${triple//-/_}
        ENV+=("CARGO_TARGET_${upper}_LINKER=$gnu-gcc" "CC_$lower=$gnu-gcc" "AR_$lower=$gnu-ar")
    fi
done
start=$SECONDS
if ((${#TARGETS[@]})); then
    say "cargo build --release --locked ${TARGETS[*]} (Debian's cargo, into target/debs/)"
    env "${ENV[@]}" "$DEBIAN_CARGO" build --release --locked --bin portaria "${TARGETS[@]}"
fi
if [[ -n $REUSE && " ${ARCHES[*]} " == *" $HOST "* ]]; then
    [[ -x target/release/portaria ]] || die "--reuse-release-build: there is no target/release/portaria (cargo build --release --locked first)"
    say "$HOST: target/release/portaria as it is, built $(date -r target/release/portaria '+%F %T')"
fi
say "built in $((SECONDS - start)) s"

# ---- package ----
# --no-strip: the release profile strips already (check-debs.sh checks it).
BUILT=()
for arch in "${ARCHES[@]}"; do
    if [[ -n $REUSE && $arch == "$HOST" ]]; then
        deb=$("$CARGO_DEB" --no-build --no-strip --output "$OUT" | tail -n 1)
    else
        deb=$(env "${ENV[@]}" "$CARGO_DEB" --no-build --no-strip --target "$(triple_of "$arch")" \
            --output "$OUT" | tail -n 1)
    fi
    [[ -f $deb ]] || die "$arch: cargo-deb did not print the path of a package (got: $deb)"
    BUILT+=("$deb")
done

say "checking each package (packaging/check-debs.sh)"
bash packaging/check-debs.sh "${BUILT[@]}"

say "the packages:"
for deb in "${BUILT[@]}"; do printf '    %s (%d KiB)\n' "$deb" "$(du -k "$deb" | cut -f1)"; done
