#!/bin/bash
# Commands in single quotes run inside the container or in a child shell.
# shellcheck disable=SC2016
#
# System test: the gpushare .deb in a booted Debian 12 container.
#
# Builds the package (dist/build-deb.sh, lintian included) unless GPUSHARE_DEB
# names one, makes a Debian bookworm rootfs with debootstrap (cached per day
# under $E2E_CACHE), boots a copy of it with systemd-nspawn, and checks inside:
# install, start with sd-notify readiness, watchdog, D-Bus API and policy,
# authorization of writes, CLI, reload, upgrade, profile.d opt-in, the packaged
# hook with a CUDA program, usage accounting and the metrics endpoint, compute
# mode and MPS under the unit's sandbox,
# journald logs, stop, and that a purge leaves nothing behind.
#
# Runs as root. Needs no GPU: the daemon runs with [gpu] nvml = false, and the
# CUDA and GPU-side checks use the test doubles in tests/fakes (fake
# libcuda.so.1, libnvidia-ml.so.1 and nvidia-cuda-mps-control, built with gcc).
# Environment: GPUSHARE_DEB (prebuilt .deb), E2E_CACHE (default
# /var/cache/gpushare-e2e), E2E_MIRROR (default http://deb.debian.org/debian),
# E2E_KEEP=1 (leave the container running for inspection).
# Prints "N passed, M failed" last and exits non-zero on any failure.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${E2E_CACHE:-/var/cache/gpushare-e2e}
mirror=${E2E_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
started=$(date +%s)

passed=0
failed=0
failures=()
work=
debdir=
nspawn_pid=
init_pid=

say() { printf '%s e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { say "$*"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, systemd-nspawn, nsenter)"

# ---- host tools ----
missing=()
need() { command -v "$1" >/dev/null || missing+=("$2"); }
need systemd-nspawn systemd-container
need debootstrap debootstrap
need nsenter util-linux
need dpkg-buildpackage dpkg-dev
need dh debhelper
need lintian lintian
need man man-db
need python3 python3
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    if ! { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }; then
        die "could not install ${missing[*]}"
    fi
fi

cleanup() {
    if [ "${E2E_KEEP-0}" = 1 ] && [ -n "$init_pid" ]; then
        say "container kept: nsenter -t $init_pid -a bash; stop it with kill $nspawn_pid"
        return
    fi
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        # SIGTERM makes systemd-nspawn shut the container down cleanly.
        kill "$nspawn_pid" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$nspawn_pid" 2>/dev/null
        wait "$nspawn_pid" 2>/dev/null
    fi
    rm -rf "$checklog" ${work:+"$work"} ${debdir:+"$debdir"}
}
checklog=$(mktemp)
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- checks ----
# check NAME COMMAND...: runs COMMAND, counts the result, shows its output on failure.
check() {
    local name=$1
    shift
    if "$@" >"$checklog" 2>&1; then
        passed=$((passed + 1))
        printf 'ok   - %s\n' "$name"
    else
        failed=$((failed + 1))
        failures+=("$name")
        printf 'FAIL - %s\n' "$name"
        sed 's/^/       | /' "$checklog" | tail -n 30
    fi
}

# ---- the package ----
if [ -n "${GPUSHARE_DEB-}" ]; then
    deb=$(realpath "$GPUSHARE_DEB")
    [ -f "$deb" ] || die "GPUSHARE_DEB=$GPUSHARE_DEB does not exist"
else
    say "building the package"
    debdir=$(mktemp -d)
    check "package builds and lintian reports no errors" \
        env LINTIAN=1 "$repo/dist/build-deb.sh" "$debdir"
    debs=("$debdir"/gpushare_*.deb)
    deb=${debs[0]}
    [ -f "$deb" ] || die "no package was built"
fi
check "man pages render without warnings" "$repo/tests/system/check-man.sh"

# ---- the rootfs, cached per day ----
rootfs="$cache/$suite-$(date -u +%Y%m%d)"
if [ ! -f "$rootfs/.complete" ]; then
    say "debootstrap $suite into $rootfs"
    mkdir -p "$cache"
    rm -rf "$rootfs.tmp" "$rootfs"
    debootstrap --variant=minbase \
        --include=systemd,systemd-sysv,dbus,libpam-systemd,polkitd,passwd,procps \
        "$suite" "$rootfs.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 \
        || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed"; }
    touch "$rootfs.tmp/.complete"
    mv "$rootfs.tmp" "$rootfs"
    # Older days' copies are no longer needed.
    find "$cache" -mindepth 1 -maxdepth 1 -name "$suite-*" ! -path "$rootfs" -exec rm -rf {} +
fi

work=$(mktemp -d /var/tmp/gpushare-e2e.XXXXXX)
root="$work/root"
machine="gpushare-e2e-$$"

cp -a "$rootfs" "$root"
cp "$deb" "$root/root/gpushare.deb"

# ---- boot ----
say "booting $machine"
systemd-nspawn -b --register=no --keep-unit -M "$machine" -D "$root" --console=read-only \
    </dev/null >"$work/console.log" 2>&1 &
nspawn_pid=$!
# The container's init is the child of systemd-nspawn that is PID 1 in its namespace.
for _ in $(seq 100); do
    for child in $(pgrep -P "$nspawn_pid"); do
        if awk '/^NSpid:/ { exit !($NF == 1 && NF > 2) }' "/proc/$child/status" 2>/dev/null; then
            init_pid=$child
        fi
    done
    [ -n "$init_pid" ] && break
    kill -0 "$nspawn_pid" 2>/dev/null || break
    sleep 0.2
done
[ -n "$init_pid" ] || { tail -n 30 "$work/console.log" >&2; die "the container did not start"; }

# ctr COMMAND...: runs COMMAND inside the container with a clean environment.
ctr() {
    nsenter -t "$init_pid" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 HOME=/root "$@"
}
# as USER COMMAND...: runs COMMAND inside the container as USER.
as() {
    local user=$1
    shift
    ctr runuser -u "$user" -- env HOME="/home/$user" "$@"
}

booted() {
    local state='' _
    # systemctl fails to connect until systemd has set up its private socket.
    for _ in $(seq 120); do
        state=$(ctr timeout 120 systemctl is-system-running --wait 2>&1)
        case "$state" in running|degraded|stopping|maintenance) break ;; esac
        sleep 1
    done
    echo "system state: $state"
    # "degraded" is fine: some units of a stock system fail in a container.
    [ "$state" = running ] || [ "$state" = degraded ]
}
check "container boots (systemd reaches running)" booted

# ---- helpers ----
unit_prop() { ctr systemctl show -P "$2" "$1"; }

expect_eq() {
    # expect_eq WHAT EXPECTED ACTUAL
    if [ "$2" = "$3" ]; then return 0; fi
    echo "$1: expected '$2', got '$3'"
    return 1
}

unit_state() {
    # unit_state ACTIVE_STATE [RESULT]
    local active result
    active=$(unit_prop gpushare.service ActiveState)
    result=$(unit_prop gpushare.service Result)
    echo "ActiveState=$active Result=$result SubState=$(unit_prop gpushare.service SubState)"
    [ "$active" = "$1" ] && { [ -z "${2-}" ] || [ "$result" = "$2" ]; }
}

manager() {
    # manager [busctl options] METHOD [SIGNATURE ARGS...], as root
    ctr busctl call org.gpushare1 /org/gpushare1 org.gpushare1.Manager "$@"
}

# client_field [USER] NAME KEY: prints KEY of client NAME from ListClients.
client_field() {
    local user=root
    if [ $# = 3 ]; then user=$1; shift; fi
    local json
    if [ "$user" = root ]; then
        json=$(ctr busctl --json=short call org.gpushare1 /org/gpushare1 org.gpushare1.Manager ListClients)
    else
        json=$(as "$user" busctl --json=short call org.gpushare1 /org/gpushare1 org.gpushare1.Manager ListClients)
    fi || return 1
    python3 -c '
import json, sys
name, key = sys.argv[1], sys.argv[2]
for c in json.loads(sys.stdin.read())["data"][0]:
    if c.get("name", {}).get("data") == name:
        v = c.get(key, {}).get("data")
        print(v if v is not None else "<no %s>" % key)
        sys.exit(0)
print("<no client %s>" % name)
' "$1" "$2" <<<"$json"
}

# fails COMMAND...: COMMAND must fail.
fails() { ! "$@"; }
# output_matches REGEX COMMAND...: COMMAND succeeds and its output matches REGEX.
output_matches() {
    local re=$1 out
    shift
    if ! out=$("$@" 2>&1); then echo "$out"; echo "(failed)"; return 1; fi
    echo "$out"
    grep -Eq -- "$re" <<<"$out"
}
# output_is EXPECTED COMMAND...: COMMAND prints exactly EXPECTED.
output_is() {
    local want=$1 out
    shift
    out=$("$@" 2>&1)
    echo "[$out]"
    [ "$out" = "$want" ]
}
# output_lacks REGEX COMMAND...: COMMAND succeeds and its output does not match REGEX.
output_lacks() {
    local re=$1 out
    shift
    if ! out=$("$@" 2>&1); then echo "$out"; echo "(failed)"; return 1; fi
    echo "$out"
    ! grep -Eq -- "$re" <<<"$out"
}
# fails_matching REGEX COMMAND...: COMMAND fails and its output matches REGEX.
fails_matching() {
    local re=$1 out
    shift
    if out=$("$@" 2>&1); then echo "succeeded: $out"; return 1; fi
    echo "$out"
    grep -Eqi -- "$re" <<<"$out"
}

near() {
    # near WHAT EXPECTED ACTUAL: floating point comparison
    python3 -c 'import sys; sys.exit(abs(float(sys.argv[1]) - float(sys.argv[2])) > 1e-6)' "$2" "$3" 2>/dev/null \
        && return 0
    echo "$1: expected $2, got $3"
    return 1
}

# ---- users and the test configuration ----
ctr useradd -m -s /bin/bash bob
ctr useradd -m -s /bin/bash carol
ctr useradd -m -s /bin/bash dave
ctr groupadd gpuadmins
ctr usermod -aG gpuadmins carol

# Placed before installing, kept by --force-confold: the first start already
# runs with it. nvml = false: there is no GPU here.
mkdir -p "$root/etc/gpushare"
# The container shares the host's network: a port of its own for the metrics.
metrics_port=$((20000 + $$ % 20000))
# Written beside and renamed into place: the daemon watches the file, and must
# never read it half written.
write_config() {
    cat >"$root/etc/gpushare/gpushare.toml.new" <<EOF
[daemon]
admin_groups = ["gpuadmins"]
[gpu]
nvml = false
[metrics]
listen = "127.0.0.1:$metrics_port"
[defaults]
limit = 1.0
[clients.train]
request = $1
limit = 1.0
memory = "1GiB"
users = ["bob", "carol"]
EOF
    mv "$root/etc/gpushare/gpushare.toml.new" "$root/etc/gpushare/gpushare.toml"
}
write_config 0.25

# ---- install ----
say "installing the package"
check "dpkg -i installs the package" \
    ctr dpkg -i --force-confold --force-confdef /root/gpushare.deb
ctr dpkg -L gpushare >"$work/files" 2>/dev/null
check "installed files are in place" ctr sh -ec '
    test -x /usr/bin/gpushared
    test -x /usr/bin/gpushare
    test -f /usr/lib/x86_64-linux-gnu/libgpushare.so
    test -f /usr/lib/systemd/system/gpushare.service
    test -f /usr/lib/systemd/system/gpushare.socket
    test -f /usr/share/dbus-1/system.d/org.gpushare1.conf
    test -f /usr/share/polkit-1/actions/org.gpushare1.policy
    test -f /etc/gpushare/gpushare.toml
    test -f /etc/profile.d/gpushare.sh
    test -f /usr/share/man/man5/gpushare.toml.5.gz
    test -f /usr/share/man/man7/libgpushare.7.gz
    test -f /usr/share/man/man1/gpushare.1.gz
    test -f /usr/share/man/man8/gpushared.8.gz
    test -f /usr/share/gpushare/grafana/gpushare.json'
check "the config is a conffile" ctr sh -c 'dpkg-query -W -f="\${Conffiles}" gpushare | grep -q " /etc/gpushare/gpushare.toml "'
check "units verify (systemd-analyze verify)" \
    ctr sh -c 'out=$(systemd-analyze verify --man=no gpushare.service gpushare.socket 2>&1); echo "$out"; [ -z "$out" ]'
check "polkit knows org.gpushare1.manage" ctr sh -c 'pkaction --action-id org.gpushare1.manage --verbose'
check "postinst enabled the unit" expect_eq is-enabled enabled "$(ctr systemctl is-enabled gpushare.service)"
check "postinst started the unit" unit_state active

# ---- start, readiness, watchdog ----
check "postinst enabled and started the socket unit" sh -c '
    echo "$1 $2"; [ "$1" = enabled ] && [ "$2" = active ]' _ \
    "$(ctr systemctl is-enabled gpushare.socket)" "$(ctr systemctl is-active gpushare.socket)"
ctr systemctl stop gpushare.service
check "stop: unit inactive, not failed" unit_state inactive success
check "stop keeps the socket open (gpushare.socket)" ctr sh -c '
    systemctl is-active gpushare.socket && test -S /run/gpushare/gpushare.sock'
activated() {
    as bob perl -MIO::Socket::UNIX -e '
        IO::Socket::UNIX->new(Peer => "/run/gpushare/gpushare.sock") or die "connect: $!\n"' || return 1
    local _
    for _ in $(seq 50); do
        [ "$(ctr systemctl is-active gpushare.service)" = active ] && return 0
        sleep 0.2
    done
    ctr systemctl status gpushare.service --no-pager
    return 1
}
check "a connection to the socket starts the daemon (socket activation)" activated
ctr systemctl stop gpushare.service
check "systemctl start reaches active" ctr systemctl start gpushare.service
check "unit is active after start (sd-notify readiness)" unit_state active
check "main process is gpushared" \
    expect_eq comm gpushared "$(ctr sh -c 'ps -o comm= -p "$(systemctl show -P MainPID gpushare.service)"' 2>&1)"
check "daemon owns org.gpushare1 on the system bus" \
    ctr sh -c 'busctl status org.gpushare1 | grep -q "^Comm=gpushared"'
check "socket exists and is world-connectable" ctr sh -c '
    test -S /run/gpushare/gpushare.sock
    mode=$(stat -c %a /run/gpushare/gpushare.sock); echo "socket mode $mode"
    [ "$mode" = 666 ] || [ "$mode" = 777 ]
    dir=$(stat -c %a /run/gpushare); echo "dir mode $dir"; [ "$dir" = 755 ]'
check "an unprivileged user can connect to the socket" as bob perl -MIO::Socket::UNIX -e '
    IO::Socket::UNIX->new(Peer => "/run/gpushare/gpushare.sock") or die "connect: $!\n"'

mkdir -p "$root/etc/systemd/system/gpushare.service.d"
printf '[Service]\nWatchdogSec=3s\n' >"$root/etc/systemd/system/gpushare.service.d/watchdog.conf"
ctr systemctl daemon-reload
ctr systemctl restart gpushare.service
pid_before=$(unit_prop gpushare.service MainPID)
sleep 8
check "daemon keeps the watchdog fed (WatchdogSec=3s, 8 s)" sh -c '
    [ "$1" = active ] && [ "$2" = "$3" ] && [ "$4" = 0 ] ||
    { echo "ActiveState=$1 MainPID $2 -> $3 NRestarts=$4"; exit 1; }' _ \
    "$(unit_prop gpushare.service ActiveState)" "$pid_before" \
    "$(unit_prop gpushare.service MainPID)" "$(unit_prop gpushare.service NRestarts)"
rm -rf "$root/etc/systemd/system/gpushare.service.d"
ctr systemctl daemon-reload

# ---- D-Bus API ----
check "busctl introspect shows the Manager interface" ctr sh -c '
    out=$(busctl introspect org.gpushare1 /org/gpushare1) || exit 1
    echo "$out" | grep -E "^org.gpushare1.Manager +interface" &&
    echo "$out" | grep -E "^\.ListClients +method" &&
    echo "$out" | grep -E "^\.SetShare +method" &&
    echo "$out" | grep -E "^\.Version +property"'
shipped_matches_live() {
    # The introspection XML in the package names the same members as the live service.
    local shipped=/usr/share/dbus-1/interfaces/org.gpushare1.Manager.xml
    ctr test -f "$shipped" || { echo "no $shipped"; return 1; }
    ctr busctl introspect --xml-interface org.gpushare1 /org/gpushare1 >"$work/live.xml" || return 1
    python3 - "$root$shipped" "$work/live.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
def members(path):
    for iface in ET.parse(path).getroot().iter("interface"):
        if iface.get("name") == "org.gpushare1.Manager":
            return {(el.tag, el.get("name"), el.get("type"), el.get("access"),
                     tuple((a.get("type"), a.get("direction")) for a in el.iter("arg")))
                    for el in iface if el.tag in ("method", "signal", "property")}
    return set()
shipped, live = members(sys.argv[1]), members(sys.argv[2])
for m in sorted(shipped - live): print("only in the package:", m)
for m in sorted(live - shipped): print("only in the service:", m)
sys.exit(0 if shipped and shipped == live else 1)
PY
}
check "shipped introspection XML matches the live service" shipped_matches_live
check "ListClients as root" manager ListClients
check "ListClients lists the configured client" near request 0.25 "$(client_field train request)"
check "Version property" ctr busctl get-property org.gpushare1 /org/gpushare1 org.gpushare1.Manager Version
check "an unprivileged user may call ListClients" \
    as bob busctl call org.gpushare1 /org/gpushare1 org.gpushare1.Manager ListClients
check "an unprivileged user may read properties" \
    as bob busctl get-property org.gpushare1 /org/gpushare1 org.gpushare1.Manager Version
check "an unprivileged user may not own org.gpushare1" fails \
    as bob timeout 10 busctl call org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus RequestName su org.gpushare1 4

# ---- reload ----
write_config 0.3
pid_before=$(unit_prop gpushare.service MainPID)
check "systemctl reload gpushare" ctr systemctl reload gpushare.service
sleep 1
check "reload keeps the daemon running" sh -c '[ "$1" = active ] && [ "$2" = "$3" ]' _ \
    "$(unit_prop gpushare.service ActiveState)" "$pid_before" "$(unit_prop gpushare.service MainPID)"
check "reload applies the changed config" near request 0.3 "$(client_field train request)"

check "gpushare status" ctr gpushare status
write_config broken-value
check "a broken config is refused on reload" ctr systemctl reload gpushare.service
sleep 1
check "the daemon keeps running after a broken config" unit_state active
check "ConfigError names the problem" output_matches 'clients\.train|request' \
    ctr busctl get-property org.gpushare1 /org/gpushare1 org.gpushare1.Manager ConfigError
check "the previous config stays in force" near request 0.3 "$(client_field train request)"
write_config 0.3
ctr systemctl reload gpushare.service
sleep 1
check "ConfigError is cleared by a good config" output_is 's ""' \
    ctr busctl get-property org.gpushare1 /org/gpushare1 org.gpushare1.Manager ConfigError

# ---- authorization of writes ----
check "root: gpushare set changes a share" ctr gpushare set train --request 0.5
check "root: the change is visible in ListClients" near request 0.5 "$(client_field train request)"
check "root: gpushare clients lists it" ctr sh -c 'gpushare clients | grep -w train'
check "unprivileged: gpushare set is refused" \
    fails_matching 'authori' as bob gpushare set train --request 0.1
check "unprivileged: SetShare over D-Bus is refused (NotAuthorized)" \
    fails_matching '^Error org\.gpushare1\.Error\.NotAuthorized' as bob dbus-send --system --print-reply \
    --dest=org.gpushare1 /org/gpushare1 org.gpushare1.Manager.SetShare string:train double:0.1 double:1.0
check "unprivileged: the share is unchanged" near request 0.5 "$(client_field bob train request)"
check "unprivileged: gpushare clients works" as bob gpushare clients
check "admin_groups member: gpushare set is allowed" as carol gpushare set train --request 0.4
check "admin_groups member: the change is visible" near request 0.4 "$(client_field train request)"

# ---- upgrade (reinstall): restart, conffile kept ----
pid_before=$(unit_prop gpushare.service MainPID)
check "reinstalling the package (upgrade path) needs no questions" \
    ctr sh -c 'dpkg -i /root/gpushare.deb </dev/null'
check "the upgrade restarted the daemon and it is active" sh -c '
    echo "ActiveState=$1 MainPID $2 -> $3"; [ "$1" = active ] && [ "$2" != "$3" ]' _ \
    "$(unit_prop gpushare.service ActiveState)" "$pid_before" "$(unit_prop gpushare.service MainPID)"
check "the upgrade kept the admin's config" ctr grep -qx 'request = 0.3' /etc/gpushare/gpushare.toml

# ---- CLI and hook wiring ----
check "gpushare run preloads the hook and names the client" \
    output_is "/usr/lib/x86_64-linux-gnu/libgpushare.so train" as bob gpushare run --name train -- sh -c 'echo "$LD_PRELOAD $GPUSHARE_CLIENT"'
check "gpushare run puts the Python start-up code first on PYTHONPATH" \
    output_is "/usr/lib/gpushare/python:/x" as bob env PYTHONPATH=/x gpushare run -- sh -c 'echo "$PYTHONPATH"'
mkdir -p "$root/home/bob/.config/gpushare"
touch "$root/home/bob/.config/gpushare/auto"
check "profile.d: a user who opted in gets the hook at login" \
    output_is "/usr/lib/x86_64-linux-gnu/libgpushare.so ok" ctr runuser -l bob -c 'echo "$LD_PRELOAD $(ls / >/dev/null && echo ok)"'
check "profile.d: other users get nothing" output_is "" ctr runuser -l carol -c 'echo "${LD_PRELOAD-}"'

# ---- the packaged hook against the packaged daemon ----
# A CUDA program of an unprivileged user, run with `gpushare run`, against the
# fake libcuda.so.1 of the hook's tests (built here; there is no GPU). Client
# "train" has a 1 GiB memory cap, which the hook must report and enforce.
fakes="$repo/tests/fakes"
if [ -f "$fakes/fake_cuda.c" ] && [ -f "$fakes/client.c" ] && command -v gcc >/dev/null; then
    fake_dir="$root/opt/fake-cuda"
    mkdir -p "$fake_dir"
    if ! { gcc -O1 -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
        -o "$fake_dir/libcuda.so.1" "$fakes/fake_cuda.c" -lpthread &&
        gcc -O1 -DVIA_DLSYM -o "$fake_dir/client" "$fakes/client.c" -ldl; }; then
        die "cannot build the fake driver"
    fi
    chmod -R a+rX "$fake_dir"
    cuda_as_bob() {
        as bob env LD_LIBRARY_PATH=/opt/fake-cuda gpushare run --name train -- /opt/fake-cuda/client "$@"
    }
    check "hook: cuMemGetInfo reports the client's cap" \
        output_matches '^info free=[0-9]+ total=1073741824 -> 0$' cuda_as_bob info
    check "hook: an allocation above the cap fails with out-of-memory" \
        output_matches '^alloc 2147483648 -> 2$' cuda_as_bob alloc:2147483648
    check "hook: a user the client does not list is refused (CUDA_ERROR_NOT_PERMITTED)" \
        fails_matching '^init 800$' as dave env LD_LIBRARY_PATH=/opt/fake-cuda \
        gpushare run --name train -- /opt/fake-cuda/client info
    check "hook: launches run under the daemon's tokens" \
        output_matches '^launch 10 -> 0$' cuda_as_bob launch:10:1000
    check "hook: the daemon granted the client its token" \
        output_matches '^[1-9][0-9]*$' client_field train grants
    ctr runuser -u bob -- env LD_LIBRARY_PATH=/opt/fake-cuda \
        sh -c 'gpushare run --name train -- /opt/fake-cuda/client alloc:1048576 sleep:4000 >/dev/null 2>&1 &'
    sleep 2
    check "hook: the daemon counts the attached process's memory" \
        output_matches '^[1-9][0-9]*$' client_field train memory_used
    check "hook: the attached process is listed" output_matches '[0-9]' client_field train pids
    sleep 3
    check "hook: memory is freed when the process exits" near memory_used 0 "$(client_field train memory_used)"
    check "usage: gpushare usage shows bob his own GPU time" \
        output_matches '^bob +[0-9]' as bob gpushare usage --by user
    check "usage: an admin_groups member sees bob's GPU time" \
        output_matches '^bob +[0-9]' as carol gpushare usage --by user
    check "usage: another user does not see bob's GPU time" \
        output_lacks '^bob ' as dave gpushare usage --by user
    check "metrics: bob's leases of client train are counted" \
        output_matches '^gpushare_client_leases_total\{client="train",user="bob"\} [1-9]' \
        ctr perl -MIO::Socket::INET -e '
            my $s = IO::Socket::INET->new("127.0.0.1:'"$metrics_port"'") or die "connect: $!";
            print $s "GET /metrics HTTP/1.0\r\n\r\n";
            print while <$s>;'

    # ---- restarts and upgrades keep control ----
    # Four processes of bob (client "train", 1 GiB cap) hold 64 MiB each and
    # launch kernels for a while; the daemon is restarted, then the package is
    # upgraded. The fake NVML lists the four as GPU processes and the policy
    # kills unattached ones: none may be taken for one.
    mkdir -p "$root/opt/fake-gpu" "$root/var/lib/gpushare-fake"
    gcc -O1 -shared -fPIC -o "$root/opt/fake-gpu/libnvidia-ml.so.1" "$fakes/fake_nvml.c" ||
        die "cannot build the fake NVML"
    printf 'count 1\nmode 0 0\n' >"$root/var/lib/gpushare-fake/state"
    mkdir -p "$root/etc/systemd/system/gpushare.service.d"
    printf '[Service]\nEnvironment=FAKE_NVML_STATE=/var/lib/gpushare-fake/state\nReadWritePaths=/var/lib/gpushare-fake\n' \
        >"$root/etc/systemd/system/gpushare.service.d/fake-gpu.conf"
    cp "$root/etc/gpushare/gpushare.toml" "$work/config.saved"
    python3 - "$root/etc/gpushare/gpushare.toml" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read().replace("nvml = false\n", 'nvml = true\nnvml_library = "/opt/fake-gpu/libnvidia-ml.so.1"\n'
    'set_compute_mode = false\nunattached = "kill"\nscan_interval = "1s"\n')
open(p, "w").write(s)
PY
    ctr systemctl daemon-reload
    ctr systemctl restart gpushare.service
    for i in 1 2 3 4; do
        ctr runuser -u bob -- env LD_LIBRARY_PATH=/opt/fake-cuda sh -c "
            (gpushare run --name train -- /opt/fake-cuda/client alloc:67108864 run:40000:1000000:4:0 \
                >/tmp/four.$i.out 2>&1; echo \$? >/tmp/four.$i.rc) &"
    done
    # four_attached SECONDS: the four processes are attached with their 256 MiB
    # within SECONDS.
    four_attached() {
        local deadline=$(($(date +%s%N) + $1 * 1000000000)) pids mem
        while :; do
            pids=$(client_field train pids)
            mem=$(client_field train memory_used)
            if python3 -c 'import sys; sys.exit(not (len(eval(sys.argv[1])) == 4 and int(sys.argv[2]) == 4 << 26))' "$pids" "$mem" 2>/dev/null; then
                echo "attached: $pids, $mem bytes"
                return 0
            fi
            if [ "$(date +%s%N)" -gt "$deadline" ]; then
                echo "after $1 s: pids $pids, memory_used $mem"
                return 1
            fi
            sleep 0.1
        done
    }
    # The fake NVML lists the four processes on the GPU.
    four_on_gpu() {
        local pids p
        pids=$(client_field train pids | tr -d '[],')
        { printf 'count 1\nmode 0 0\n'; for p in $pids; do echo "proc 0 $p 134217728"; done; } \
            >"$root/var/lib/gpushare-fake/state"
        echo "on the GPU: $pids"
    }
    # restart_keeps_them COMMAND...: runs COMMAND, which restarts the daemon; the
    # four are attached again with the same memory within 3 s of its return (the
    # new daemon is ready then), and still run, unreported, four scans later.
    restart_keeps_them() {
        local t0 t1 pid_before
        pid_before=$(unit_prop gpushare.service MainPID)
        "$@" || { echo "$* failed"; return 1; }
        t0=$(date +%s%N)
        [ "$(unit_prop gpushare.service MainPID)" != "$pid_before" ] || { echo "the daemon did not restart"; return 1; }
        four_attached 3 || return 1
        t1=$(date +%s%N)
        echo "$(((t1 - t0) / 1000000)) ms" >>"$work/reattach_ms"
        sleep 4
        four_attached 0 || return 1
        ctr sh -c '! journalctl -u gpushare.service --no-pager -o cat --since "-6s" | grep -i "without gpushare"' || return 1
        ctr sh -c 'for i in 1 2 3 4; do test ! -e /tmp/four.$i.rc || { cat /tmp/four.$i.out; exit 1; }; done'
    }
    check "four processes attach with their memory" four_attached 10
    four_on_gpu
    check "systemctl restart: all four re-attach with their memory, none is taken for unattached" \
        restart_keeps_them ctr systemctl restart gpushare.service
    check "upgrade of the package: all four re-attach with their memory, none is taken for unattached" \
        restart_keeps_them ctr sh -c 'dpkg -i /root/gpushare.deb </dev/null >/dev/null'
    [ -s "$work/reattach_ms" ] && say "the four re-attached, restart then upgrade: $(tr '\n' ' ' <"$work/reattach_ms")after the new daemon was ready"
    four_done() {
        local _
        for _ in $(seq 600); do
            ctr sh -c 'test -e /tmp/four.1.rc && test -e /tmp/four.2.rc && test -e /tmp/four.3.rc && test -e /tmp/four.4.rc' && break
            sleep 0.1
        done
        ctr sh -c '
            for i in 1 2 3 4; do echo "$i: rc $(cat /tmp/four.$i.rc): $(grep -c "^gpushare: re-attached" /tmp/four.$i.out) re-attaches, $(grep "^run" /tmp/four.$i.out)"; done
            for i in 1 2 3 4; do
                [ "$(cat /tmp/four.$i.rc)" = 0 ] && grep -q "^run [0-9]* kernels" /tmp/four.$i.out &&
                    [ "$(grep -c "^gpushare: re-attached" /tmp/four.$i.out)" = 2 ] || exit 1
            done'
    }
    check "all four ran to the end, each re-attached twice" four_done
    check "their memory is freed when they exit" near memory_used 0 "$(client_field train memory_used)"
    cp "$work/config.saved" "$root/etc/gpushare/gpushare.toml"
    rm -rf "$root/etc/systemd/system/gpushare.service.d" "$root/opt/fake-gpu" "$root/var/lib/gpushare-fake"
    ctr systemctl daemon-reload
    ctr systemctl restart gpushare.service
else
    say "tests/fakes (fake libcuda) or gcc missing: the hook checks are skipped"
fi

# ---- the GPU side under the unit's sandbox: fake NVML, fake MPS control ----
# The daemon sets the compute mode through NVML and runs the MPS control daemon
# as a child, all under the unit's hardening (ProtectSystem=strict, device
# policy, ...); the fakes of the GPU-side tests stand in for the driver.
if [ -f "$fakes/fake_nvml.c" ] && [ -f "$fakes/fake-mps-control" ] && command -v gcc >/dev/null; then
    gpu_dir="$root/opt/fake-gpu"
    mkdir -p "$gpu_dir" "$root/var/lib/gpushare-fake"
    gcc -O1 -shared -fPIC -o "$gpu_dir/libnvidia-ml.so.1" "$fakes/fake_nvml.c" ||
        die "cannot build the fake NVML"
    install -m 0755 "$fakes/fake-mps-control" "$gpu_dir/nvidia-cuda-mps-control"
    printf 'count 1\nmode 0 0\n' >"$root/var/lib/gpushare-fake/state"
    mkdir -p "$root/etc/systemd/system/gpushare.service.d"
    cat >"$root/etc/systemd/system/gpushare.service.d/fake-gpu.conf" <<EOF
[Service]
Environment=FAKE_NVML_STATE=/var/lib/gpushare-fake/state
ReadWritePaths=/var/lib/gpushare-fake
EOF
    cat >"$root/etc/gpushare/gpushare.toml" <<EOF
[gpu]
nvml = true
nvml_library = "/opt/fake-gpu/libnvidia-ml.so.1"
mps = true
mps_control = "/opt/fake-gpu/nvidia-cuda-mps-control"
[clients.train]
request = 0.5
users = ["bob"]
mps_thread_percentage = 50
EOF
    ctr systemctl daemon-reload
    check "with NVML and MPS: systemctl restart reaches active" ctr systemctl restart gpushare.service
    mps_ready() {
        local _
        for _ in $(seq 50); do
            ctr test -p /run/gpushare/mps/control && ctr test -s /run/gpushare/mps/fake-control.pid &&
                return 0
            sleep 0.2
        done
        ctr ls -la /run/gpushare /run/gpushare/mps
        return 1
    }
    check "MPS control daemon runs with the configured pipe directory" mps_ready
    check "MPS control daemon lives in the unit's cgroup" output_matches 'gpushare\.service' \
        ctr sh -c 'cat "/proc/$(cat /run/gpushare/mps/fake-control.pid)/cgroup"'
    check "MPS logs go to /var/log/gpushare/mps" ctr sh -c '
        grep -x CUDA_MPS_LOG_DIRECTORY=/var/log/gpushare/mps /run/gpushare/mps/fake-control.env &&
        test -d /var/log/gpushare/mps'
    check "users can reach the MPS pipe directory" as bob test -p /run/gpushare/mps/control
    check "compute mode set to EXCLUSIVE_PROCESS" ctr grep -x 'mode 0 3' /var/lib/gpushare-fake/state
    check "ListDevices lists the GPU" output_matches '^aa\{sv\} 1 ' manager ListDevices
    check "with MPS: systemctl stop" ctr systemctl stop gpushare.service
    check "with MPS: stopped cleanly, result success" unit_state inactive success
    check "compute mode restored at stop" ctr grep -x 'mode 0 0' /var/lib/gpushare-fake/state
    check "no MPS control daemon is left" ctr sh -c '! pgrep -af "[n]vidia-cuda-mps"'
    rm -rf "$root/etc/systemd/system/gpushare.service.d" "$gpu_dir" "$root/var/lib/gpushare-fake"
    write_config 0.4
    ctr systemctl daemon-reload
    ctr systemctl start gpushare.service
else
    say "tests/fakes (fake NVML, fake MPS control) or gcc missing: the GPU-side checks are skipped"
fi

# ---- logs ----
daemon_logged() {
    # Entries that gpushared wrote itself (not systemd's about the unit).
    ctr journalctl -u gpushare.service --no-pager -o short
    [ "$(ctr journalctl -u gpushare.service --no-pager -o json | grep -c '"_COMM":"gpushared"')" -gt 0 ]
}
check "journalctl -u gpushare shows the daemon's own log" daemon_logged

# ---- stop ----
check "systemctl stop gpushare" ctr systemctl stop gpushare.service
check "stopped cleanly: inactive, result success" unit_state inactive success
check "no gpushared process is left" ctr sh -c '! pgrep -a gpushared'
check "usage is kept in /var/lib/gpushare" ctr test -s /var/lib/gpushare/usage.db

. "$repo/tests/system/e2e-containers.sh"
# ---- Slurm: a one-node cluster whose jobs run under clients of their own ----
. "$repo/tests/system/e2e-slurm.sh"
# ---- whole-server preload, Jupyter kernel (their own file) ----
. "$repo/tests/system/e2e-preload.sh"

# ---- purge ----
ctr systemctl start gpushare.service
check "apt-get purge gpushare" ctr sh -c 'DEBIAN_FRONTEND=noninteractive apt-get purge -y gpushare'
left_behind() {
    local left=0 f
    cp "$work/files" "$root/root/files"
    ctr sh -c 'while read -r f; do
        [ -d "$f" ] && continue
        if [ -e "$f" ] || [ -L "$f" ]; then echo "left: $f"; fi
    done </root/files' >"$work/left"
    if [ -s "$work/left" ]; then cat "$work/left"; left=1; fi
    for f in /etc/gpushare /var/log/gpushare /var/lib/gpushare /run/gpushare /usr/share/doc/gpushare \
             /etc/systemd/system/multi-user.target.wants/gpushare.service \
             /etc/systemd/system/sockets.target.wants/gpushare.socket \
             /lib/systemd/system/gpushare.service /lib/systemd/system/gpushare.socket; do
        if ctr test -e "$f"; then echo "left: $f"; left=1; fi
    done
    [ "$(ctr systemctl list-unit-files --no-legend gpushare.service | wc -l)" = 0 ] \
        || { echo "unit file still known"; left=1; }
    ctr sh -c '! pgrep -a gpushared' || left=1
    [ -s "$work/files" ] || { echo "no file list"; left=1; }
    return $left
}
check "purge leaves nothing behind" left_behind

elapsed=$(($(date +%s) - started))
if [ "$failed" -gt 0 ]; then
    say "failed: ${failures[*]}"
    ctr journalctl -u gpushare.service --no-pager -n 40 2>/dev/null | sed 's/^/journal | /' >&2
fi
say "done in ${elapsed}s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
