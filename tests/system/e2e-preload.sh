# shellcheck shell=bash disable=SC2016,SC2154
# System checks of the whole-server mode and the Jupyter kernel, sourced by
# e2e.sh inside its booted container (its helpers: check, ctr, as,
# output_matches, output_is, fails_matching, client_field, write_config, ...):
#   - gpushare preload enable|disable|status on /etc/ld.so.preload: refused to
#     users and for a missing hook, keeps the admin's lines, idempotent; with it
#     a CUDA program started plainly attaches as its user's default client,
#     /bin/true and a set-user-ID program start cleanly, and a set-user-ID
#     program ignores the hook's environment variables; disable, removal and
#     purge of the package take the entry out;
#   - gpushare kernelspec install|remove: a kernel started by jupyter_client
#     (as a notebook server does) as an unprivileged user runs its cells under
#     the hook, attached as the kernel's client.
# The fake libcuda.so.1 goes into /usr/local/lib for these checks (a
# set-user-ID program ignores LD_LIBRARY_PATH) and is taken out at the end.

if ! command -v gcc >/dev/null || [ ! -f "$repo/tests/fakes/fake_cuda.c" ]; then
    say "gcc or tests/fakes missing: the preload and kernel checks are skipped"
    return 0
fi
say "whole-server preload and the Jupyter kernel"
preload_list=/etc/ld.so.preload
hook_lib=/usr/lib/x86_64-linux-gnu/libgpushare.so
cp "$root/etc/gpushare/gpushare.toml" "$work/config.before-preload"
# Users without a client of their own get a 768 MiB cap: a process that
# reports it attached as its user's default client.
write_config 0.4
printf '[defaults.users.bob]\nmemory = "768MiB"\n' >>"$root/etc/gpushare/gpushare.toml"
mkdir -p "$root/usr/local/lib" "$root/usr/local/libexec/gpushare-e2e"
if ! { gcc -O1 -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
    -o "$root/usr/local/lib/libcuda.so.1" "$repo/tests/fakes/fake_cuda.c" -lpthread &&
    gcc -O1 -DVIA_DLSYM -o "$root/usr/local/libexec/gpushare-e2e/client" "$repo/tests/fakes/client.c" -ldl; }; then
    die "cannot build the fake driver"
fi
ctr ldconfig
# restarted: the sections before may have left it running with their own config
ctr systemctl restart gpushare.service

# pid_client PID: the client (and its users) that the daemon lists PID under.
pid_client() {
    local json
    json=$(ctr busctl --json=short call org.gpushare1 /org/gpushare1 org.gpushare1.Manager ListClients) || return 1
    python3 -c '
import json, sys
pid = int(sys.argv[1])
for c in json.loads(sys.stdin.read())["data"][0]:
    if pid in (c.get("pids", {}).get("data") or []):
        print(c["name"]["data"], c.get("users", {}).get("data"))
        sys.exit(0)
print("<pid %d in no client>" % pid)
sys.exit(1)
' "$1" <<<"$json"
}
preload_lines() { ctr sh -c "cat $preload_list 2>/dev/null || echo '<no $preload_list>'"; }

# ---- preload: refusals ----
check "preload enable: refused to an unprivileged user" \
    fails_matching 'run it as root' as bob gpushare preload enable
check "preload enable: refused for a missing hook" \
    fails_matching 'not there.*every program print an error' ctr gpushare preload enable --hook /usr/lib/nowhere/libgpushare.so
check "preload: the refusals left no list behind" ctr test ! -e "$preload_list"

# ---- preload: enable ----
printf '# site preload list\n' >"$root$preload_list"
check "preload enable as root" output_matches '^enabled' ctr gpushare preload enable
check "preload enable: the admin's line is kept and the hook added once" \
    output_is "$(printf '# site preload list\n%s' "$hook_lib")" preload_lines
check "preload enable again: nothing changes" output_matches '^already enabled' ctr gpushare preload enable
check "preload enable again: still one entry" \
    output_is "$(printf '# site preload list\n%s' "$hook_lib")" preload_lines
check "preload status (as a user): enabled" output_matches "^enabled: .* preloads $hook_lib\$" as bob gpushare preload status
check "preload: /bin/true starts cleanly (no output, status 0)" output_is "" as bob /bin/true
maps_only_the_hook() {
    local maps
    maps=$(as bob cat /proc/self/maps | awk 'NF > 5 { print $6 }' | sort -u)
    echo "$maps"
    grep -q libgpushare <<<"$maps" && ! grep -Eq 'libgcc_s|libcuda' <<<"$maps"
}
check "preload: a program that never calls CUDA maps the hook, and nothing else of gpushare's" \
    maps_only_the_hook
check "preload: a set-user-ID program (passwd -S) starts cleanly with the hook" \
    output_matches '^bob [LNP] ' as bob passwd -S bob
ctr install -m 4755 /bin/cat /usr/local/libexec/gpushare-e2e/setuid-cat
check "preload: a set-user-ID program maps the hook" \
    output_matches 'libgpushare\.so' as bob /usr/local/libexec/gpushare-e2e/setuid-cat /proc/self/maps

# ---- preload: CUDA programs attach without gpushare run ----
ctr runuser -u bob -- sh -c '/usr/local/libexec/gpushare-e2e/client info alloc:1048576 sleep:4000 >/tmp/plain.out 2>&1 & echo $! >/tmp/plain.pid'
sleep 2
plain_pid=$(ctr cat /tmp/plain.pid)
check "preload: a CUDA program started plainly attaches as its user's default client" \
    output_matches 'bob' pid_client "$plain_pid"
sleep 3
check "preload: it got its user's cap (768 MiB)" \
    output_matches '^info free=[0-9]+ total=805306368 -> 0$' ctr cat /tmp/plain.out
check "preload: GPUSHARE_CLIENT still names a client" \
    output_matches '^info free=[0-9]+ total=1073741824 -> 0$' \
    as bob env GPUSHARE_CLIENT=train /usr/local/libexec/gpushare-e2e/client info
check "preload: a user a client does not list is still refused it" \
    fails_matching '^init 800$' as dave env GPUSHARE_CLIENT=train /usr/local/libexec/gpushare-e2e/client info
# A set-user-ID CUDA program: the hook ignores the caller's GPUSHARE_* variables
# (secure-execution mode), so it neither runs unmanaged nor attaches as train.
ctr install -m 4755 /usr/local/libexec/gpushare-e2e/client /usr/local/libexec/gpushare-e2e/setuid-client
setuid_ignores_variables() {
    local out
    out=$(as bob env GPUSHARE_SOCKET=/tmp/elsewhere.sock GPUSHARE_CLIENT=train GPUSHARE_STATS=1 \
        /usr/local/libexec/gpushare-e2e/setuid-client info 2>&1)
    echo "$out"
    grep -Eq '^info free=[0-9]+ total=[0-9]+ -> 0$' <<<"$out" &&
        ! grep -Eq 'elsewhere|total=1073741824|stats:' <<<"$out"
}
check "preload: a set-user-ID CUDA program ignores GPUSHARE_SOCKET and GPUSHARE_CLIENT" \
    setuid_ignores_variables

# ---- preload: disable ----
check "preload disable" output_matches '^disabled' ctr gpushare preload disable
check "preload disable: only the hook's line went" output_is "# site preload list" preload_lines
check "preload disable again: nothing changes" output_matches '^already disabled' ctr gpushare preload disable
check "preload status: disabled" output_matches '^disabled' ctr gpushare preload status
check "preload disable: new programs no longer map the hook" \
    output_lacks 'libgpushare' as bob cat /proc/self/maps

# ---- the Jupyter kernel ----
say "installing python3-ipykernel and python3-jupyter-client in the container"
if ctr sh -c 'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends python3-ipykernel python3-jupyter-client >/dev/null'; then
    check "kernelspec install --client train (system-wide)" \
        output_matches 'installed kernel gpushare-train in /usr/local/share/jupyter/kernels/gpushare-train' \
        ctr gpushare kernelspec install --client train
    check "kernelspec: kernel.json runs the kernel through gpushare run" \
        output_matches '"/usr/bin/gpushare",\s*"run",\s*"--name",\s*"train",\s*"--",\s*"/usr/bin/python3",\s*"-m",\s*"ipykernel_launcher"' \
        ctr sh -c 'tr -d "\n" </usr/local/share/jupyter/kernels/gpushare-train/kernel.json'
    check "kernelspec install --user (as a user)" \
        output_matches "/home/bob/.local/share/jupyter/kernels/gpushare\$" as bob gpushare kernelspec install --user
    check "kernelspec: refused for an unprivileged user system-wide" \
        fails_matching 'permission denied.*--user' as bob gpushare kernelspec install --name mine
    check "kernelspec: jupyter_client finds both kernels" \
        output_matches "^gpushare gpushare-train$" as bob python3 -c '
from jupyter_client.kernelspec import KernelSpecManager
print(" ".join(sorted(k for k in KernelSpecManager().find_kernel_specs() if k.startswith("gpushare"))))'
    check "kernelspec remove: refused for a kernel gpushare did not write" \
        fails_matching 'not a gpushare kernel' ctr gpushare kernelspec remove --prefix /usr --name python3
    check "kernelspec remove: the other kernel is untouched" ctr test -f /usr/share/jupyter/kernels/python3/kernel.json
    cat >"$root/usr/local/libexec/gpushare-e2e/notebook.py" <<'PY'
# Starts a kernel as a notebook server does and runs one cell in it.
import sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name=sys.argv[1], startup_timeout=60)
cell = r'''
import ctypes, os
cuda = ctypes.CDLL("libcuda.so.1")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
print("init", cuda.cuInit(0))
print("info", cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), total.value)
print("pid", os.getpid())
print("hook", any("libgpushare.so" in l for l in open("/proc/self/maps")))
print("client", os.environ.get("GPUSHARE_CLIENT"))
'''
out = []
try:
    reply = kc.execute_interactive(
        cell, timeout=60,
        output_hook=lambda m: out.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
    print("".join(out), end="")
    print("status", reply["content"]["status"])
    if len(sys.argv) > 2:
        # Keep the kernel while the caller looks at the daemon.
        open(sys.argv[2], "w").write("".join(out))
        import time
        time.sleep(4)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
PY
    # notebook USER: runs the cell in a gpushare-train kernel of USER.
    notebook() { as "$1" python3 /usr/local/libexec/gpushare-e2e/notebook.py gpushare-train 2>&1; }
    cell_attached() {
        local out
        out=$(notebook bob)
        echo "$out"
        grep -qx "init 0" <<<"$out" && grep -qx "info 0 1073741824" <<<"$out" &&
            grep -qx "hook True" <<<"$out" && grep -qx "client train" <<<"$out" &&
            grep -qx "status ok" <<<"$out"
    }
    check "kernel: a cell runs under the hook, attached as train (its 1 GiB cap)" cell_attached
    ctr runuser -u bob -- env HOME=/home/bob sh -c 'cd /tmp && python3 /usr/local/libexec/gpushare-e2e/notebook.py gpushare-train /tmp/kernel.out >/dev/null 2>&1 &'
    kernel_pid=
    for _ in $(seq 100); do
        kernel_pid=$(ctr sh -c 'sed -n "s/^pid //p" /tmp/kernel.out 2>/dev/null')
        [ -n "$kernel_pid" ] && break
        sleep 0.2
    done
    check "kernel: the daemon lists the kernel's process under train, as bob's" \
        output_matches "^train .*bob" pid_client "${kernel_pid:-0}"
    check "kernel: a user train does not list is refused in the cell (CUDA_ERROR_NOT_PERMITTED)" \
        output_matches '^init 800$' notebook dave
    sleep 4
    kernels_removed() {
        ctr gpushare kernelspec remove --client train && as bob gpushare kernelspec remove --user &&
            ctr test ! -e /usr/local/share/jupyter/kernels/gpushare-train &&
            ctr test ! -e /home/bob/.local/share/jupyter/kernels/gpushare
    }
    check "kernelspec remove (system-wide and --user)" kernels_removed
else
    check "python3-ipykernel and python3-jupyter-client install in the container" false
fi

# ---- the package takes the entry out: remove, purge ----
ctr gpushare preload enable >/dev/null
removed_with_the_package() {
    ctr dpkg -r gpushare >/dev/null || return 1
    output_is "# site preload list" preload_lines
}
check "package remove: the hook's entry goes with the hook" removed_with_the_package
check "package remove: programs start cleanly afterwards" output_is "" as bob /bin/true
cp "$work/config.before-preload" "$root/etc/gpushare/gpushare.toml"
ctr dpkg -i --force-confold --force-confdef /root/gpushare.deb >/dev/null
rm -f "$root$preload_list"
ctr gpushare preload enable >/dev/null
purged_with_the_package() {
    ctr dpkg --purge gpushare >/dev/null || return 1
    ! ctr test -e "$preload_list" || { preload_lines; return 1; }
}
check "package purge: no list is left where gpushare made it" purged_with_the_package
check "package purge: programs start cleanly afterwards" output_is "" as bob /bin/true
# Back to the installed package, as e2e.sh's own purge expects it.
mkdir -p "$root/etc/gpushare"
cp "$work/config.before-preload" "$root/etc/gpushare/gpushare.toml"
ctr dpkg -i --force-confold --force-confdef /root/gpushare.deb >/dev/null
ctr systemctl stop gpushare.service
rm -rf "$root/usr/local/lib/libcuda.so.1" "$root/usr/local/libexec/gpushare-e2e"
ctr ldconfig
