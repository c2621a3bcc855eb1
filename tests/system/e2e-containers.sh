# shellcheck shell=bash
# Commands in single quotes run inside the container or in a child shell.
# shellcheck disable=SC2016,SC2154
#
# System checks of containers, sourced by e2e.sh (its helpers and variables:
# check, ctr, as, client_field, output_matches, fails_matching, $root, $work,
# $fakes): real podman (Debian 12's 4.3, installed here with apt-get inside the
# booted container) runs an image made from the container's own files (podman
# import, no registry) with `--device gpushare.io/gpu=all` after
# `gpushare cdi`; a fake-CUDA client inside attaches as the container's user,
# gets its client's memory cap, is refused a client it may not use, and a
# client bound by `units` to the container's scope is chosen for it.
#
# Inside systemd-nspawn, podman runs with --cgroups=disabled and
# --network=host: nspawn mounts the cgroup v1 controllers read-only, so crun
# cannot make the container's cgroups (podman's own scope fails with "creating
# cgroup directory"), and without CAP_NET_ADMIN crun cannot bring up a private
# network's loopback. The scope podman's systemd cgroup manager makes on a
# host (libpod-ID.scope under machine.slice) is made with systemd-run --scope
# instead, and the container's processes run in it. Keyrings are off
# (containers.conf): nspawn's seccomp filter refuses keyctl.

containers_checks() {
    if [ ! -x "$root/opt/fake-cuda/client" ]; then
        say "no fake CUDA client: the container checks are skipped"
        return
    fi
    ctr systemctl start gpushare.service
    say "installing podman in the container"
    if ! ctr sh -c 'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends podman crun >/tmp/podman-install.log 2>&1'; then
        check "podman installs in the container" ctr tail -n 20 /tmp/podman-install.log
        return
    fi
    mkdir -p "$root/etc/containers"
    printf '[containers]\nkeyring = false\n' >"$root/etc/containers/containers.conf"
    # The image: the container's own programs and libraries with the fake driver
    # (/opt/fake-cuda), imported from a tarball.
    check "podman imports an image made from a tarball" ctr sh -c '
        tar -C / -cf /var/tmp/image.tar --exclude=usr/share --exclude=var/lib/containers \
            bin sbin lib lib64 usr etc opt/fake-cuda &&
        podman import -q /var/tmp/image.tar localhost/gpushare-e2e >/dev/null &&
        rm -f /var/tmp/image.tar && podman image exists localhost/gpushare-e2e'

    check "gpushare cdi writes /etc/cdi/gpushare.yaml" ctr sh -c '
        gpushare cdi && grep -x "kind: \"gpushare.io/gpu\"" /etc/cdi/gpushare.yaml &&
        grep -F "hostPath: \"/run/gpushare\"" /etc/cdi/gpushare.yaml'
    check "gpushare cdi with a missing hook fails and names it" \
        fails_matching 'no-such\.so' ctr gpushare cdi --hook /no-such.so --output /tmp/cdi.yaml
    check "the failed gpushare cdi wrote nothing" ctr test ! -e /tmp/cdi.yaml

    # Client "train" (1 GiB cap) admits bob and carol; "pods" (512 MiB cap) is
    # bound to podman's scopes.
    cp "$root/etc/gpushare/gpushare.toml" "$work/containers-config.saved"
    cat >>"$root/etc/gpushare/gpushare.toml" <<'EOF'
[clients.pods]
memory = "512MiB"
units = ["libpod-*.scope"]
EOF
    ctr systemctl reload gpushare.service
    sleep 1
    check "config with units: the bound client is listed" near memory 536870912 "$(client_field pods memory)"

    local bob_ids dave_ids
    bob_ids="$(ctr id -u bob):$(ctr id -g bob)"
    dave_ids="$(ctr id -u dave):$(ctr id -g dave)"
    # in_container SCOPE USER:GROUP [ENV=VALUE...] -- ARGS...: runs the fake client
    # in a container of the image, in the scope SCOPE under machine.slice.
    in_container() {
        local scope=$1 ids=$2 envs=()
        shift 2
        while [ "$1" != -- ]; do envs+=(-e "$1"); shift; done
        shift
        ctr systemd-run --scope -q --slice=machine.slice --unit="$scope" \
            podman run --rm --pull=never --cgroups=disabled --network=host \
            --device gpushare.io/gpu=all --user "$ids" -e LD_LIBRARY_PATH=/opt/fake-cuda "${envs[@]}" \
            localhost/gpushare-e2e /opt/fake-cuda/client "$@"
    }
    check "container: the hook is preloaded from the CDI spec and finds the socket" \
        output_matches '^/usr/lib/gpushare/libgpushare\.so /run/gpushare/gpushare\.sock$' \
        ctr systemd-run --scope -q --slice=machine.slice --unit="ctr-env-$$" \
        podman run --rm --pull=never --cgroups=disabled --network=host --device gpushare.io/gpu=all \
        localhost/gpushare-e2e sh -c 'echo "$LD_PRELOAD $GPUSHARE_SOCKET"; test -S "$GPUSHARE_SOCKET"'
    check "container: bob's CUDA process gets client train's cap" \
        output_matches '^info free=[0-9]+ total=1073741824 -> 0$' \
        in_container "ctr-bob1-$$" "$bob_ids" GPUSHARE_CLIENT=train -- info
    check "container: an allocation above the cap fails with out-of-memory" \
        output_matches '^alloc 2147483648 -> 2$' \
        in_container "ctr-bob2-$$" "$bob_ids" GPUSHARE_CLIENT=train -- alloc:2147483648
    check "container: a user client train does not list is refused (CUDA_ERROR_NOT_PERMITTED)" \
        fails_matching '^init 800$' \
        in_container "ctr-dave1-$$" "$dave_ids" GPUSHARE_CLIENT=train -- info

    # A long-running container process: the daemon lists it under client train,
    # with the uid the kernel reports (bob's).
    ctr sh -c "systemd-run --scope -q --slice=machine.slice --unit=ctr-bob3-$$ \
        podman run --rm --pull=never --cgroups=disabled --network=host --device gpushare.io/gpu=all \
        --user $bob_ids -e LD_LIBRARY_PATH=/opt/fake-cuda -e GPUSHARE_CLIENT=train \
        localhost/gpushare-e2e /opt/fake-cuda/client alloc:1048576 sleep:6000 >/tmp/ctr-long.out 2>&1 &"
    attached_as_bob() {
        local pids='' pid _
        for _ in $(seq 50); do
            pids=$(client_field train pids | tr -d '[],')
            [ -n "$pids" ] && break
            sleep 0.2
        done
        echo "client train pids: $pids"
        [ -n "$pids" ] || return 1
        for pid in $pids; do
            echo "pid $pid: user $(ctr ps -o user= -p "$pid"), $(ctr grep '^0::' "/proc/$pid/cgroup")"
            [ "$(ctr ps -o user= -p "$pid")" = bob ] || return 1
        done
        ctr sh -c 'for p in $(pgrep -f "client alloc:1048576 sleep:6000"); do
            grep -q "^0::/machine.slice/ctr-bob3-" /proc/$p/cgroup && exit 0; done; exit 1'
    }
    check "container: the daemon lists the container's process under train as bob" attached_as_bob
    check "container: its memory is counted" output_matches '^[1-9][0-9]*$' client_field train memory_used

    # In podman's scope, no client named: the client bound by units.
    local id=e2e$$
    check "container in libpod-ID.scope: the client bound by units is chosen" \
        output_matches '^info free=[0-9]+ total=536870912 -> 0$' \
        in_container "libpod-$id.scope" "$dave_ids" -- info
    check "container in libpod-ID.scope: a client its units do not bind is refused" \
        fails_matching '^init 800$' in_container "libpod-$id-2.scope" "$dave_ids" GPUSHARE_CLIENT=train -- info
    check "outside podman's scopes: the bound client is refused to dave" \
        fails_matching '^init 800$' as dave env LD_LIBRARY_PATH=/opt/fake-cuda \
        gpushare run --name pods -- /opt/fake-cuda/client info
    check "a scope made with systemd-run --scope also binds (libpod-ID.scope, no container)" \
        output_matches '^info free=[0-9]+ total=536870912 -> 0$' \
        ctr systemd-run --scope -q --slice=machine.slice --unit="libpod-$id-3.scope" \
        runuser -u dave -- env LD_LIBRARY_PATH=/opt/fake-cuda \
        gpushare run -- /opt/fake-cuda/client info

    # The long-running process sleeps 6 s after podman starts it; on a slow
    # machine podman takes seconds more. Wait for it to end, then for the
    # daemon to see its connection close.
    memory_freed_after_exit() {
        local _ used=''
        for _ in $(seq 300); do
            ctr pgrep -f "client alloc:1048576 sleep:6000" >/dev/null || break
            sleep 0.2
        done
        if ctr pgrep -f "client alloc:1048576 sleep:6000" >/dev/null; then
            echo "the container's process still runs after 60 s"
            return 1
        fi
        for _ in $(seq 50); do
            used=$(client_field train memory_used)
            near memory_used 0 "$used" >/dev/null && return 0
            sleep 0.2
        done
        near memory_used 0 "$used"
    }
    check "container: memory is freed when its process exits" memory_freed_after_exit
    cp "$work/containers-config.saved" "$root/etc/gpushare/gpushare.toml"
    ctr systemctl reload gpushare.service
    ctr sh -c 'podman rmi -f localhost/gpushare-e2e >/dev/null 2>&1; rm -f /etc/cdi/gpushare.yaml'
}
containers_checks
