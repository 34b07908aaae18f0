#!/usr/bin/env bash
# Check portaria's .deb files without installing or running them, so that the arm64 and armhf
# packages are checked on a PC as thoroughly as the amd64 one (which packaging/check-deb.sh also
# installs and runs):
#
#   packaging/check-debs.sh target/debian/portaria_*.deb
#
# For each package:
# - the fields: Package, Version (Cargo.toml's), Architecture (the file name's), Depends (a
#   package for each shared library the binary needs, libc6 at least as new as the newest glibc
#   symbol version it uses), the conffile, the maintainer scripts (those of packaging/debian/);
# - the contents: every asset of Cargo.toml's [package.metadata.deb] (the one list cargo-deb
#   packages from) at its place with its mode, and each file but the binary byte for byte the
#   one in the source tree (the unit, the config, the guides);
# - the binary (readelf): ELF class, machine and ABI for the architecture (AArch64; ARM EABI5
#   hard-float, ARMv7 at most, so a Pi 2 runs it; X86-64), its loader, the shared libraries it
#   needs, the newest GLIBC_ symbol version (at most OLDEST_GLIBC: the oldest Raspberry Pi OS
#   the packages support), stripped, and within the size budget.
#
# The bounds can be tightened for a try (this is how the check was seen failing):
#   MAX_BINARY_BYTES=4000000 packaging/check-debs.sh target/debian/portaria_*_arm64.deb
# Exits 1 on the first package that fails, naming what failed.
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
# The packages as given, from wherever this is run; then the checkout's root.
if (($#)); then
    packages=()
    for arg in "$@"; do packages+=("$(realpath -m -- "$arg")"); done
    set -- "${packages[@]}"
fi
cd "$(dirname "$0")/.."

# The stripped binary's budget (docs/performance.md: the Pi's 6 MiB).
MAX_BINARY_BYTES=${MAX_BINARY_BYTES:-$((6 * 1024 * 1024))}
# The newest glibc symbol version the binary may need: Debian 12 / Raspberry Pi OS Bookworm's
# glibc. Raspberry Pi OS Bullseye (Debian 11) has 2.31: docs/raspberry-pi.md says which releases
# the packages run on.
OLDEST_GLIBC=${OLDEST_GLIBC:-2.36}

CONFIG=etc/portaria/portaria.toml
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

ok() { printf '  ok   %s\n' "$*"; }
fail() {
    printf '  FAIL %s: %s\n' "${DEB:-check-debs}" "$*" >&2
    exit 1
}

(($#)) || fail "usage: packaging/check-debs.sh PACKAGE.deb..."
for tool in dpkg-deb readelf python3; do
    command -v "$tool" >/dev/null || fail "$tool is missing (Debian packages dpkg, binutils, python3)"
done

VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)
# Cargo.toml's asset list, as cargo-deb reads it: source, destination (a directory when it ends
# in /), mode. The binary's source is target/release/portaria whatever the target.
python3 - >"$WORK/assets" <<'EOF'
import os, tomllib
with open("Cargo.toml", "rb") as f:
    deb = tomllib.load(f)["package"]["metadata"]["deb"]
for src, dest, mode in deb["assets"]:
    if dest.endswith("/"):
        dest += os.path.basename(src)
    print(src, dest.lstrip("/"), mode, sep="\t")
EOF
(($(wc -l <"$WORK/assets") > 5)) || fail "read too few assets from Cargo.toml: $(cat "$WORK/assets")"

# ls -l's mode string for an octal mode of a regular file: 644 -> -rw-r--r--.
mode_string() {
    local out=- digit i
    for ((i = 0; i < ${#1}; i++)); do
        digit=${1:i:1}
        out+=$( ((digit & 4)) && echo r || echo -)$( ((digit & 2)) && echo w || echo -)$( ((digit & 1)) && echo x || echo -)
    done
    echo "$out"
}

check_one() {
    DEB=$1
    local dir
    dir="$WORK/$(basename "$DEB" .deb)"
    mkdir -p "$dir"
    [[ -f $DEB ]] || fail "no such file"
    printf '== %s\n' "$DEB"

    # ---- fields ----
    field() { dpkg-deb --field "$DEB" "$1"; }
    local arch package version depends
    package=$(field Package)
    arch=$(field Architecture)
    version=$(field Version)
    depends=$(field Depends)
    [[ $package == portaria ]] || fail "Package is '$package', not portaria"
    [[ $version == "$VERSION-"* ]] || fail "Version is '$version'; Cargo.toml says $VERSION"
    [[ $(basename "$DEB") == "portaria_${version}_${arch}.deb" ]] ||
        fail "the file name does not say version $version and architecture $arch"
    ok "Package portaria, Version $version, Architecture $arch"

    local machine class abi loader
    case $arch in
    amd64) machine='Advanced Micro Devices X86-64' class=ELF64 loader=/lib64/ld-linux-x86-64.so.2 abi= ;;
    arm64) machine=AArch64 class=ELF64 loader=/lib/ld-linux-aarch64.so.1 abi= ;;
    armhf) machine=ARM class=ELF32 loader=/lib/ld-linux-armhf.so.3 abi='Version5 EABI, hard-float ABI' ;;
    *) fail "Architecture '$arch' is none of amd64, arm64, armhf" ;;
    esac

    local conffiles
    conffiles=$(dpkg-deb --info "$DEB" conffiles 2>/dev/null) || fail "the package has no conffiles list"
    [[ $conffiles == "/$CONFIG" ]] || fail "conffiles is '$conffiles', expected exactly /$CONFIG"
    ok "conffiles: /$CONFIG"
    dpkg-deb --control "$DEB" "$dir/DEBIAN"
    local script
    for script in postinst prerm postrm; do
        [[ -x $dir/DEBIAN/$script ]] || fail "maintainer script $script is missing or not executable"
        cmp -s "$dir/DEBIAN/$script" "packaging/debian/$script" ||
            fail "maintainer script $script differs from packaging/debian/$script"
    done
    ok "maintainer scripts postinst, prerm, postrm (those of packaging/debian/)"

    # ---- contents ----
    dpkg-deb --contents "$DEB" >"$dir/contents"
    dpkg-deb --extract "$DEB" "$dir/root"
    local src dest mode count=0
    while IFS=$'\t' read -r src dest mode; do
        grep -q -E "^$(mode_string "$mode") (root/root|0/0) +[0-9]+ [0-9-]+ [0-9:]+ \./$dest\$" "$dir/contents" ||
            fail "the package lacks /$dest with mode $mode (Cargo.toml's assets)"
        if [[ $src != target/* ]]; then
            cmp -s "$src" "$dir/root/$dest" || fail "/$dest differs from $src"
        fi
        count=$((count + 1))
    done <"$WORK/assets"
    ok "all $count assets of Cargo.toml at their place with their mode, the same bytes as in the source tree"
    local must
    for must in usr/bin/portaria usr/lib/systemd/system/portaria.service usr/lib/sysusers.d/portaria.conf \
        "$CONFIG" usr/share/doc/portaria/raspberry-pi.md usr/share/doc/portaria/tunnels.md \
        usr/share/doc/portaria/portaria.env.example usr/share/doc/portaria/copyright; do
        [[ -f $dir/root/$must ]] || fail "the package lacks /$must"
    done
    ok "the unit, the sysusers file, the config, the Pi and tunnel guides, the secrets example, the copyright"
    grep -q 'portaria\.env$' "$dir/contents" && fail "the package ships a portaria.env: secrets are the owner's, never packaged"

    # ---- the binary ----
    local bin="$dir/root/usr/bin/portaria"
    readelf -h "$bin" >"$dir/header"
    local is
    is="$(sed -n 's/^ *Class: *//p' "$dir/header") $(sed -n 's/^ *Machine: *//p' "$dir/header")"
    [[ $is == "$class $machine" ]] || fail "the binary is $is, not $class $machine (for $arch)"
    if [[ -n $abi ]]; then
        grep -q -F "$abi" "$dir/header" || fail "the binary's ABI is not '$abi' (for $arch): $(grep Flags: "$dir/header")"
        # Debian's armhf baseline is ARMv7-A (Pi 2 and later); ARMv8 code would not run on a Pi 2.
        readelf -A "$bin" >"$dir/attributes"
        grep -q -E '^ +Tag_CPU_arch: v7$' "$dir/attributes" ||
            fail "the binary is not built for ARMv7: $(grep Tag_CPU_arch: "$dir/attributes")"
        grep -q -E '^ +Tag_ABI_VFP_args: VFP registers$' "$dir/attributes" ||
            fail "the binary does not pass floats in VFP registers (hard float)"
    fi
    ok "binary: $class, $machine${abi:+, $abi, ARMv7}"
    readelf -l "$bin" | grep -q -F "[Requesting program interpreter: $loader]" ||
        fail "the binary's loader is not $loader: $(readelf -l "$bin" | grep interpreter)"
    ok "loader $loader"
    readelf -S -W "$bin" | grep -q -E ' \.symtab ' && fail "the binary is not stripped (it has a .symtab)"
    local size
    size=$(stat -c %s "$bin")
    ((size <= MAX_BINARY_BYTES)) ||
        fail "the binary is $size bytes ($(numfmt --to=iec-i --suffix=B "$size")), over the budget of $MAX_BINARY_BYTES"
    ok "stripped, $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }') MiB), budget $MAX_BINARY_BYTES"

    # Shared libraries: glibc's, and libgcc_s (unwinding); anything else (an OpenSSL, a system
    # SQLite) would be a dependency the package does not declare.
    local needed lib
    needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort)
    for lib in $needed; do
        case $lib in
        # libgcc_s: Debian's libc6 depends on libgcc-s1, so cargo-deb leaves it out of Depends.
        libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | ld-linux* | libgcc_s.so.1) ;;
        *) fail "the binary needs $lib, which is neither glibc nor libgcc_s" ;;
        esac
    done
    ok "shared libraries: ${needed//$'\n'/ }"

    local glibc declared
    glibc=$(readelf -V -W "$bin" | grep -o -E 'Name: GLIBC_[0-9.]+' | sed 's/Name: GLIBC_//' | sort -u -V | tail -n 1)
    [[ -n $glibc ]] || fail "found no GLIBC_ symbol version in the binary"
    # Packed relative relocations (.cargo/config.toml) are glibc 2.36's.
    if readelf -V -W "$bin" | grep -q 'Name: GLIBC_ABI_DT_RELR' && dpkg --compare-versions "$glibc" lt 2.36; then
        glibc=2.36
    fi
    dpkg --compare-versions "$glibc" le "$OLDEST_GLIBC" ||
        fail "the binary needs glibc $glibc, newer than $OLDEST_GLIBC (the oldest supported Raspberry Pi OS)"
    # The highest of its libc6 (>= X): dpkg needs every one satisfied.
    declared=$(grep -o -E '\blibc6 \(>= [0-9.]+\)' <<<"$depends" | sed -E 's/.*>= ([0-9.]+)\)/\1/' | sort -V | tail -n 1 || true)
    [[ -n $declared ]] || fail "Depends does not say libc6 (>= ...): '$depends'"
    dpkg --compare-versions "$declared" ge "$glibc" ||
        fail "Depends says libc6 (>= $declared), but the binary needs glibc $glibc"
    ok "needs glibc $glibc (at most $OLDEST_GLIBC); Depends: $depends"
    unset -f field
    DEB=
}

for deb in "$@"; do check_one "$deb"; done
echo "check-debs: $# package(s) ok"
