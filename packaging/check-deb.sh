#!/usr/bin/env bash
# packaging/check-deb.sh: the .deb, built and installed for real (issue 11). It takes the package
# for this machine's architecture (or builds it from the release binary with
# `packaging/build-debs.sh --reuse-release-build`), checks its fields and contents, installs it
# with `dpkg -i`, checks what the maintainer scripts did (user, modes, nothing started), runs the
# installed binary as the `portaria` user against the installed config (serve, a signed
# `portaria send` answered 200, SIGTERM), then removes and purges the package and checks what
# each one leaves. Every check prints one line; the first miss stops the script with exit 1.
#
# Needs root (CI runs as root), dpkg, setpriv, and a machine without portaria: no package, no
# user, no /etc/portaria, no /var/lib/portaria, ports 127.0.0.1:8080 and :9464 free. It leaves
# the machine as it found it (the user and the kept /var/lib/portaria are removed at the end).
# Run from .ci/run after packaging/build-debs.sh: bash packaging/check-deb.sh target/debian/portaria_<version>-1_amd64.deb
# (without an argument it builds the package first).
set -euo pipefail
shopt -s inherit_errexit 2>/dev/null || true
cd "$(dirname "$0")/.."

CONFIG=/etc/portaria/portaria.toml
STATE=/var/lib/portaria
SECRET_VAR=PAGARME_WEBHOOK_SECRET
TEST_SECRET="check-deb-test-secret-$$-not-a-real-one"
SEND_BODY='{"id":"check_deb_1","type":"check_deb"}'
PLACEHOLDER=maintainers@portaria.invalid

ok() { printf 'check-deb: ok    %s\n' "$*"; }
warn() { printf 'check-deb: WARN  %s\n' "$*"; }
fail() {
    printf 'check-deb: FAIL  %s\n' "$*" >&2
    exit 1
}
step() { printf '== check-deb: %s\n' "$*"; }

# ---- before anything: a machine this script may install on and clean up after ----
step "preconditions"
[[ $(id -u) == 0 ]] || fail "must run as root (it installs the package with dpkg -i)"
for tool in dpkg dpkg-deb setpriv getent userdel groupdel pgrep ps stat; do
    command -v "$tool" >/dev/null || fail "missing tool: $tool"
done
if dpkg-query -W -f='${Status}' portaria 2>/dev/null | grep -q -v 'not-installed'; then
    fail "the package portaria is already on this machine (dpkg -P portaria first)"
fi
getent passwd portaria >/dev/null && fail "a user portaria already exists; this check creates and removes it"
getent group portaria >/dev/null && fail "a group portaria already exists; this check creates and removes it"
[[ -e /etc/portaria ]] && fail "/etc/portaria already exists; this check creates and removes it"
[[ -e $STATE ]] && fail "$STATE already exists; this check creates and removes it"
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in 8080 9464; do
    port_busy "$port" && fail "127.0.0.1:$port is in use; the installed config listens there"
done
ok "root, tools present, no portaria package/user/group/directories, ports 8080 and 9464 free"

WORK=$(mktemp -d)
SERVE_PID=
cleanup() {
    local rc=$?
    set +e
    if [[ -n $SERVE_PID ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -KILL "$SERVE_PID"
        wait "$SERVE_PID" 2>/dev/null
    fi
    if dpkg-query -W -f='${Status}' portaria 2>/dev/null | grep -q -v 'not-installed'; then
        dpkg -P portaria >/dev/null 2>&1
    fi
    if getent passwd portaria >/dev/null && ! userdel portaria; then
        echo "check-deb: could not remove the user portaria: remove it by hand (userdel portaria)" >&2
    fi
    getent group portaria >/dev/null && groupdel portaria
    rm -rf "$STATE" /etc/portaria "$WORK"
    if ((rc == 0)); then
        echo "check-deb: the machine is as it was (package purged, user, group and $STATE removed)"
    else
        echo "check-deb: cleaned up after the failure" >&2
    fi
}
trap cleanup EXIT

# ---- the package ----
if (($#)); then
    DEB=$1
    [[ -f $DEB ]] || fail "no such package: $DEB"
    ok "the package $DEB ($(du -k "$DEB" | cut -f1) KiB)"
else
    step "build the package from the release binary (packaging/build-debs.sh)"
    cargo build --release --locked
    bash packaging/build-debs.sh --arch "$(dpkg --print-architecture)" --reuse-release-build --out "$WORK/debs"
    DEB=$(echo "$WORK"/debs/portaria_*.deb)
    [[ -f $DEB ]] || fail "packaging/build-debs.sh wrote no package in $WORK/debs"
    ok "built $DEB ($(du -k "$DEB" | cut -f1) KiB)"
fi

step "dpkg-deb --info"
dpkg-deb --info "$DEB"
field() { dpkg-deb --field "$DEB" "$1"; }
[[ $(field Package) == portaria ]] || fail "Package is '$(field Package)', not portaria"
[[ $(field Architecture) == "$(dpkg --print-architecture)" ]] ||
    fail "Architecture is '$(field Architecture)', this machine is $(dpkg --print-architecture)"
[[ $(field Depends) == *libc6* ]] || fail "Depends does not name libc6: '$(field Depends)'"
ok "Package portaria $(field Version), Architecture $(field Architecture), Depends $(field Depends)"
if [[ $(field Maintainer) == *"$PLACEHOLDER"* ]]; then
    warn "Maintainer is the placeholder '$(field Maintainer)': set it before publishing (packaging/README.md, \"Before publishing\")"
else
    ok "Maintainer $(field Maintainer)"
fi
CONFFILES=$(dpkg-deb --info "$DEB" conffiles 2>/dev/null) || fail "the package has no conffiles list"
[[ $CONFFILES == "$CONFIG" ]] || fail "conffiles is '$CONFFILES', expected exactly $CONFIG"
ok "conffiles: $CONFIG"
mkdir "$WORK/control"
dpkg-deb --control "$DEB" "$WORK/control"
for script in postinst prerm postrm; do
    [[ -x $WORK/control/$script ]] || fail "maintainer script $script is missing or not executable"
done
ok "maintainer scripts postinst, prerm, postrm"
# The service must wait for its secrets: nothing in the scripts enables or starts it (an upgrade's
# `systemctl try-restart` restarts it only if it is already running).
# Comments and echo lines (the postinst tells the owner to run `systemctl enable --now`) aside.
for script in postinst prerm postrm; do
    if grep -v -E '^[[:space:]]*(#|echo )' "$WORK/control/$script" |
        grep -E '(systemctl|deb-systemd-invoke|deb-systemd-helper)[^#]*[[:space:]](enable|start|restart|reenable)\b'; then
        fail "$script enables or starts the service (the line above)"
    fi
done
ok "no maintainer script enables or starts the service"

step "dpkg-deb --contents"
dpkg-deb --contents "$DEB" | tee "$WORK/contents"
has() { # has MODE PATH: the package holds PATH (./ prefixed) with that mode string
    grep -q -E "^$1 (root/root|0/0) +[0-9]+ [0-9-]+ [0-9:]+ \./${2#/}\$" "$WORK/contents" ||
        fail "the package lacks $2 with mode $1"
    ok "contains $2 ($1 root/root)"
}
has '-rwxr-xr-x' /usr/bin/portaria
has '-rw-r--r--' /usr/lib/systemd/system/portaria.service
has '-rw-r--r--' /usr/lib/sysusers.d/portaria.conf
has '-rw-r-----' "$CONFIG"
for alert in ntfy telegram sendmail; do
    has '-rwxr-xr-x' "/usr/lib/portaria/alerts/$alert.sh"
done
for doc in copyright README.md README.packaging.md config.example.toml portaria.env.example \
    raspberry-pi.md tunnels.md cloudflared-config.yml; do
    has '-rw-r--r--' "/usr/share/doc/portaria/$doc"
done
grep -q 'portaria\.env$' "$WORK/contents" && fail "the package ships a portaria.env: secrets are the owner's, never packaged"
ok "no portaria.env in the package"

# ---- installed ----
step "dpkg -i"
dpkg -i "$DEB"
[[ $(dpkg-query -W -f='${Status}' portaria) == "install ok installed" ]] || fail "dpkg does not list portaria as installed"
ok "installed: $(dpkg-query -W -f='${Package} ${Version}' portaria)"

IFS=: read -r _ _ uid gid _ home shell < <(getent passwd portaria) || fail "no user portaria after the install"
((uid < 1000)) || fail "portaria has uid $uid, not a system uid"
[[ $(getent group "$gid" | cut -d: -f1) == portaria ]] || fail "portaria's primary group is not portaria"
[[ $shell == */nologin || $shell == /bin/false ]] || fail "portaria's shell is $shell, not a nologin shell"
[[ $home == "$STATE" ]] || fail "portaria's home is $home, not $STATE"
ok "system user portaria: uid $uid, group portaria, home $home, shell $shell"

perm() { stat -c '%U:%G %a' "$1"; }
[[ $(perm "$CONFIG") == "root:portaria 640" ]] || fail "$CONFIG is $(perm "$CONFIG"), expected root:portaria 640"
ok "$CONFIG is root:portaria 0640"
[[ $(perm "$STATE") == "portaria:portaria 700" ]] || fail "$STATE is $(perm "$STATE"), expected portaria:portaria 700"
ok "$STATE is portaria:portaria 0700"

if pgrep -u portaria >/dev/null; then
    fail "a process runs as portaria right after the install: $(pgrep -a -u portaria)"
fi
if compgen -G '/etc/systemd/system/*.wants/portaria.service' >/dev/null; then
    fail "the unit is enabled right after the install: $(echo /etc/systemd/system/*.wants/portaria.service)"
fi
if [[ -d /run/systemd/system ]] && systemctl is-active --quiet portaria; then
    fail "systemd runs portaria right after the install"
fi
ok "the service was neither enabled nor started (no secret is set yet)"

# As the owner would: `portaria check` with no secret in the environment.
step "portaria check, before the secret is set"
set +e
env -u "$SECRET_VAR" /usr/bin/portaria check --config "$CONFIG" >"$WORK/check.out" 2>&1
rc=$?
set -e
cat "$WORK/check.out"
((rc != 0)) || fail "portaria check exited 0 without $SECRET_VAR"
grep -q "$SECRET_VAR" "$WORK/check.out" || fail "portaria check did not name $SECRET_VAR"
ok "portaria check exits $rc and names $SECRET_VAR"

# The owner sets the secret as packaging/README.md says, and checks with the documented command.
step "the secret in /etc/portaria/portaria.env, then portaria check"
ENV_FILE=/etc/portaria/portaria.env
install -m 600 -o root -g root /usr/share/doc/portaria/portaria.env.example "$ENV_FILE"
sed -i "s/^$SECRET_VAR=\$/$SECRET_VAR=$TEST_SECRET/" "$ENV_FILE"
grep -q "^$SECRET_VAR=$TEST_SECRET\$" "$ENV_FILE" || fail "the example env file has no empty $SECRET_VAR= line to fill in"
env -u "$SECRET_VAR" sh -c "set -a; . $ENV_FILE; portaria check --config $CONFIG" >"$WORK/check1.out" 2>&1 ||
    fail "the documented check with $ENV_FILE failed: $(cat "$WORK/check1.out")"
ok "with $SECRET_VAR in $ENV_FILE (root:root 0600), portaria check says: $(tail -n 1 "$WORK/check1.out")"

# The installed binary as the service's user, with what the unit gives it: the secret in its
# environment, / as working directory, UMask=0077.
as_portaria() {
    (cd / && umask 0077 && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$SECRET_VAR=${SECRET:-$TEST_SECRET}" \
        setpriv --reuid=portaria --regid=portaria --init-groups -- "$@")
}

step "as the portaria user: check, serve, send, SIGTERM"
as_portaria /usr/bin/portaria check --config "$CONFIG" >"$WORK/check2.out" 2>&1 ||
    fail "portaria check as portaria, with the secret, failed: $(cat "$WORK/check2.out")"
ok "portaria check as portaria with $SECRET_VAR set: $(tail -n 1 "$WORK/check2.out")"

(cd / && umask 0077 && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$SECRET_VAR=$TEST_SECRET" \
    setpriv --reuid=portaria --regid=portaria --init-groups -- \
    /usr/bin/portaria serve --config "$CONFIG") >"$WORK/serve.log" 2>&1 &
SERVE_PID=$!
ready=
for _ in $(seq 100); do
    kill -0 "$SERVE_PID" 2>/dev/null || fail "portaria serve exited at start: $(cat "$WORK/serve.log")"
    if answer=$( (exec 3<>/dev/tcp/127.0.0.1/9464 &&
        printf 'GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n' >&3 &&
        head -n 1 <&3) 2>/dev/null) && [[ $answer == *" 200 "* ]]; then
        ready=1
        break
    fi
    sleep 0.1
done
[[ -n $ready ]] || fail "portaria serve was not ready on 127.0.0.1:9464/readyz within 10 s: $(cat "$WORK/serve.log")"
[[ $(ps -o user= -p "$SERVE_PID") == portaria ]] || fail "portaria serve does not run as portaria"
ok "portaria serve runs as portaria (pid $SERVE_PID) and /readyz answers 200"

as_portaria /usr/bin/portaria send --config "$CONFIG" --endpoint pagarme --data "$SEND_BODY" \
    >"$WORK/send.out" 2>&1 || fail "portaria send failed: $(cat "$WORK/send.out")"
cat "$WORK/send.out"
grep -q '^1/1: 200 ' "$WORK/send.out" || fail "portaria send was not answered 200"
ok "a signed portaria send was answered 200"

# The same payload signed with another secret: verification really uses the one from the env.
set +e
SECRET="not-$TEST_SECRET" as_portaria /usr/bin/portaria send --config "$CONFIG" --endpoint pagarme \
    --data "$SEND_BODY" >"$WORK/forged.out" 2>&1
rc=$?
set -e
((rc != 0)) && grep -q '^1/1: 401 ' "$WORK/forged.out" ||
    fail "a payload signed with the wrong secret was not answered 401: $(cat "$WORK/forged.out")"
ok "the same payload signed with another secret was answered 401"

as_portaria /usr/bin/portaria events list --config "$CONFIG" >"$WORK/events.out" 2>&1 ||
    fail "portaria events list as portaria failed: $(cat "$WORK/events.out")"
grep -q -E 'pagarme +stored +0 +check_deb' "$WORK/events.out" || fail "the event is not in the database: $(cat "$WORK/events.out")"
[[ $(perm "$STATE/portaria.db") == "portaria:portaria 600" ]] ||
    fail "$STATE/portaria.db is $(perm "$STATE/portaria.db"), expected portaria:portaria 600"
ok "the event is stored in $STATE/portaria.db (portaria:portaria 0600)"

kill -TERM "$SERVE_PID"
stopped=
for _ in $(seq 150); do
    if ! kill -0 "$SERVE_PID" 2>/dev/null; then
        stopped=1
        break
    fi
    sleep 0.1
done
[[ -n $stopped ]] || fail "portaria serve did not stop within 15 s of SIGTERM"
set +e
wait "$SERVE_PID"
rc=$?
set -e
SERVE_PID=
((rc == 0)) || fail "portaria serve exited $rc after SIGTERM: $(cat "$WORK/serve.log")"
ok "portaria serve stopped on SIGTERM with exit 0"
grep -q -F "$TEST_SECRET" "$WORK"/*.out "$WORK/serve.log" && fail "the secret's value appears in portaria's output"
ok "the secret's value appears in no output or log"

# ---- removed, then purged ----
step "dpkg -r"
dpkg -r portaria
for gone in /usr/bin/portaria /usr/lib/systemd/system/portaria.service /usr/lib/sysusers.d/portaria.conf \
    /usr/share/doc/portaria/README.md; do
    [[ ! -e $gone ]] || fail "$gone is still there after dpkg -r"
done
ok "dpkg -r removed the binary, the unit, the sysusers file and the docs"
[[ -f $CONFIG ]] || fail "dpkg -r removed the conffile $CONFIG"
[[ $(dpkg-query -W -f='${Status}' portaria) == "deinstall ok config-files" ]] ||
    fail "after dpkg -r, dpkg says '$(dpkg-query -W -f='${Status}' portaria)'"
ok "dpkg -r kept the conffile $CONFIG (status: config-files)"

step "dpkg -P"
dpkg -P portaria
[[ ! -e $CONFIG ]] || fail "dpkg -P left the conffile $CONFIG"
ok "dpkg -P removed the conffile $CONFIG"
[[ -f $ENV_FILE ]] || fail "dpkg -P deleted the owner's $ENV_FILE"
ok "dpkg -P kept the owner's $ENV_FILE"
if dpkg-query -W -f='${Status}' portaria 2>/dev/null | grep -q -v 'not-installed'; then
    fail "dpkg still knows portaria after the purge"
fi
ok "dpkg no longer lists portaria"
[[ -f $STATE/portaria.db ]] || fail "dpkg -P deleted the events in $STATE (packaging/README.md says purge keeps them)"
getent passwd portaria >/dev/null || fail "dpkg -P removed the user portaria, which owns the kept database"
ok "dpkg -P kept the events in $STATE and the user portaria, as packaging/README.md says"

# A purge right after an install (the service never ran, no secrets file): nothing is left in
# /etc/portaria or /var/lib/portaria, so both go. The user from the first install is reused.
step "dpkg -i, then dpkg -P at once"
rm -f "$ENV_FILE"
dpkg -i "$DEB" >/dev/null
[[ $(getent passwd portaria | cut -d: -f3) == "$uid" ]] || fail "the reinstall did not keep the existing user portaria (uid $uid)"
ok "a second install kept the existing user portaria (uid $uid)"
rm "$STATE/portaria.db"* # as if the service had never run
dpkg -P portaria
[[ ! -e /etc/portaria ]] || fail "dpkg -P left /etc/portaria, which was empty: $(ls -A /etc/portaria)"
[[ ! -e $STATE ]] || fail "dpkg -P left $STATE, which was empty: $(ls -A "$STATE")"
ok "dpkg -P removed the empty /etc/portaria and the empty $STATE"
