# shellcheck shell=bash
# Commands in single quotes run inside the container or in a child shell.
# shellcheck disable=SC2016
#
# Part of the system test (sourced by e2e.sh, which defines root, work, repo,
# check, ctr, as, client_field, output_matches, fails_matching, ...): the Slurm
# node integration of gpushare-slurm(7) with a real one-node cluster (Debian's
# slurmctld, slurmd and munge, installed in the container here) on a node of
# one fake GPU (the fake NVML of tests/fakes: 80 GiB, 100 shards). Two users
# submit jobs of different GPU fractions whose tasks run a fake-CUDA program;
# while they run, each job has its client with its share, memory cap and user,
# and its task is attached as that client; a task of one user cannot attach as
# the other's job. Then one job ends, the other is cancelled: no client is
# left, and the usage of both was logged.

slurm_fake="$root/opt/slurm-fake"
slurm_ok=1
say "Slurm: installing slurmctld, slurmd and munge"
if ! ctr sh -c 'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends slurmd slurmctld slurm-client munge >/dev/null'; then
    slurm_ok=0
fi
check "Slurm: Debian's slurmd, slurmctld and munge install" test "$slurm_ok" = 1
mkdir -p "$slurm_fake"
if ! { gcc -O1 -shared -fPIC -Wl,-soname,libcuda.so.1 -Wl,-Bsymbolic \
        -o "$slurm_fake/libcuda.so.1" "$repo/tests/fakes/fake_cuda.c" -lpthread &&
    gcc -O1 -DVIA_DLSYM -o "$slurm_fake/client" "$repo/tests/fakes/client.c" -ldl &&
    gcc -O1 -shared -fPIC -o "$slurm_fake/libnvidia-ml.so.1" "$repo/tests/fakes/fake_nvml.c"; }; then
    slurm_ok=0
fi
chmod -R a+rX "$slurm_fake"

if [ "$slurm_ok" = 1 ]; then
    check "Slurm: the package ships the node scripts" ctr sh -ec '
        for s in prolog task-prolog epilog; do test -x /usr/lib/gpushare/slurm/$s; done
        test -f /usr/share/man/man7/gpushare-slurm.7.gz'

    # gpushared with one fake GPU of 80 GiB, and no other client asking for a share.
    cp "$root/etc/gpushare/gpushare.toml" "$work/slurm-config.saved"
    mkdir -p "$root/var/lib/gpushare-fake" "$root/etc/systemd/system/gpushare.service.d"
    printf 'count 1\nmode 0 0\n' >"$root/var/lib/gpushare-fake/state"
    printf '[Service]\nEnvironment=FAKE_NVML_STATE=/var/lib/gpushare-fake/state\nReadWritePaths=/var/lib/gpushare-fake\n' \
        >"$root/etc/systemd/system/gpushare.service.d/slurm-fake-gpu.conf"
    cat >"$root/etc/gpushare/gpushare.toml" <<'EOF'
[gpu]
nvml = true
nvml_library = "/opt/slurm-fake/libnvidia-ml.so.1"
set_compute_mode = false
EOF
    ctr systemctl daemon-reload
    ctr systemctl restart gpushare.service

    # A one-node cluster: the node's GPU is a file (Slurm only needs a path for
    # it), cut into 100 shards. Ports of its own: the container shares the
    # host's network.
    node=$(ctr hostname)
    ctlport=$((41000 + $$ % 8000))
    ctr sh -c 'mkdir -p /run/slurm-fake-gpu && touch /run/slurm-fake-gpu/nvidia0'
    cat >"$root/etc/slurm/slurm.conf" <<EOF
ClusterName=e2e
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctlport
SlurmdPort=$((ctlport + 1))
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
GresTypes=gpu,shard
Prolog=/usr/lib/gpushare/slurm/prolog
TaskProlog=/usr/lib/gpushare/slurm/task-prolog
Epilog=/usr/lib/gpushare/slurm/epilog
PrologFlags=Alloc
$(ctr slurmd -C | head -n 1) NodeAddr=127.0.0.1 Gres=gpu:1,shard:100 State=UNKNOWN
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    cat >"$root/etc/slurm/gres.conf" <<'EOF'
AutoDetect=off
Name=gpu File=/run/slurm-fake-gpu/nvidia0
Name=shard Count=100 File=/run/slurm-fake-gpu/nvidia0
EOF
    slurm_up() {
        local _
        ctr systemctl restart munge slurmctld slurmd || return 1
        for _ in $(seq 50); do
            ctr sinfo -h -o '%T' 2>/dev/null | grep -qx idle && { ctr sinfo; return 0; }
            sleep 0.2
        done
        ctr sinfo
        ctr tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log
        return 1
    }
    check "Slurm: slurmctld and slurmd run, the node of 100 shards is idle" slurm_up

    # Each job's task: says which client and hook it has, works on the GPU for
    # 2 s, then stays attached.
    submit() { # submit USER SHARDS SECONDS: prints the job id
        as "$1" sbatch --parsable --gres="shard:$2" -o "/tmp/slurm-%j.out" \
            --export="ALL,LD_LIBRARY_PATH=/opt/slurm-fake" \
            --wrap "/opt/slurm-fake/client getenv:GPUSHARE_CLIENT getenv:LD_PRELOAD run:2000:1000000:1:0 sleep:$(($3 * 1000))"
    }
    job_bob=$(submit bob 25 12)
    job_carol=$(submit carol 50 120)
    say "Slurm: bob's job $job_bob (25 shards), carol's job $job_carol (50 shards)"
    both_attached() {
        local _ pids_b pids_c
        for _ in $(seq 100); do
            pids_b=$(client_field "slurm-$job_bob" pids)
            pids_c=$(client_field "slurm-$job_carol" pids)
            [[ $pids_b == \[[0-9]* && $pids_c == \[[0-9]* ]] && { echo "$pids_b $pids_c"; return 0; }
            sleep 0.2
        done
        echo "pids: slurm-$job_bob $pids_b, slurm-$job_carol $pids_c"
        ctr squeue
        ctr journalctl -t gpushare-slurm --no-pager
        ctr tail -n 20 /var/log/slurm/slurmd.log
        return 1
    }
    check "Slurm: both jobs run, each task attached to its job's client" both_attached
    # job_client_is JOB USER REQUEST MEMORY
    job_client_is() {
        local c="slurm-$1"
        near "$c request" "$3" "$(client_field "$c" request)" &&
            near "$c limit" 1 "$(client_field "$c" limit)" &&
            expect_eq "$c memory" "$4" "$(client_field "$c" memory)" &&
            expect_eq "$c users" "['$2']" "$(client_field "$c" users)" || return 1
        echo "$c: request $3, memory $4, users $2"
    }
    check "Slurm: bob's job (25 of 100 shards): request 0.25, limit 1, a quarter of the 80 GiB, bob only" \
        job_client_is "$job_bob" bob 0.25 $((20 << 30))
    check "Slurm: carol's job (50 of 100 shards): request 0.5, limit 1, half of the 80 GiB, carol only" \
        job_client_is "$job_carol" carol 0.5 $((40 << 30))
    # task_runs_as JOB USER: the job's client's processes are the user's, and
    # the task was put under it by the TaskProlog.
    task_runs_as() {
        local pid uid want
        want=$(ctr id -u "$2")
        for pid in $(client_field "slurm-$1" pids | tr -d '[],'); do
            uid=$(ctr awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
            echo "pid $pid of uid $uid (want $want)"
            [ "$uid" = "$want" ] || return 1
        done
        ctr cat "/tmp/slurm-$1.out"
        ctr grep -qx "env GPUSHARE_CLIENT=slurm-$1" "/tmp/slurm-$1.out" &&
            ctr grep -qx "env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libgpushare.so" "/tmp/slurm-$1.out"
    }
    check "Slurm: bob's task runs as bob, preloaded with the hook, as its job's client" task_runs_as "$job_bob" bob
    check "Slurm: carol's task runs as carol, preloaded with the hook, as its job's client" task_runs_as "$job_carol" carol
    check "Slurm: the jobs' clients are runtime clients, kept in /run/gpushare, not across reboots" ctr sh -c "
        grep -q '\"slurm-$job_bob\"' /run/gpushare/clients.toml &&
        grep -q '\"slurm-$job_carol\"' /run/gpushare/clients.toml &&
        ! grep -qs slurm- /var/lib/gpushare/clients.toml"
    ctr systemctl restart gpushare.service
    check "Slurm: a restart of gpushared keeps the jobs' clients, and their tasks re-attach" both_attached
    check "Slurm: after the restart, carol's job keeps its share, cap and user" job_client_is "$job_carol" carol 0.5 $((40 << 30))
    check "Slurm: bob cannot attach as carol's job (CUDA_ERROR_NOT_PERMITTED)" \
        fails_matching '^init 800$' as bob env LD_LIBRARY_PATH=/opt/slurm-fake \
        gpushare run --name "slurm-$job_carol" -- /opt/slurm-fake/client info

    # bob's job ends on its own; carol's is cancelled.
    ctr scancel "$job_carol"
    jobs_gone() {
        local _
        for _ in $(seq 150); do
            [ -z "$(ctr squeue -h)" ] &&
                ! ctr gpushare clients | grep -q '^slurm-' && { ctr gpushare clients; return 0; }
            sleep 0.2
        done
        ctr squeue
        ctr gpushare clients
        return 1
    }
    check "Slurm: after one job ended and one was cancelled, no slurm- client is left" jobs_gone
    usage_logged() {
        ctr journalctl -t gpushare-slurm --no-pager -o cat
        ctr sh -c "journalctl -t gpushare-slurm --no-pager -o cat | grep -E \
            '^job $1 of $2: client slurm-$1 used GPU time [0-9.]*[1-9][0-9.]* s in [1-9][0-9]* leases, waited [0-9.]+ s, memory [0-9.]+ GiB-s; removed$'"
    }
    check "Slurm: bob's job's usage was logged when it ended" usage_logged "$job_bob" bob
    check "Slurm: carol's cancelled job's usage was logged" usage_logged "$job_carol" carol
    check "Slurm: the node is idle again, not drained by a failed prolog or epilog" \
        output_matches '^idle$' ctr sinfo -h -o '%T'

    ctr systemctl stop slurmd slurmctld
    cp "$work/slurm-config.saved" "$root/etc/gpushare/gpushare.toml"
    rm -rf "$root/etc/systemd/system/gpushare.service.d" "$root/var/lib/gpushare-fake"
    ctr systemctl daemon-reload
    ctr systemctl restart gpushare.service
else
    say "Slurm: packages or the fakes could not be installed or built: the Slurm checks are skipped"
fi
