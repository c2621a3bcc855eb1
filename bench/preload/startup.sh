#!/bin/bash
# Start-up cost of the hook in programs that never use CUDA: /bin/true and `python3 -c pass`,
# started with and without libgpushare.so preloaded, as every program is once the hook is in
# /etc/ld.so.preload (gpushare preload enable).
#
#   bench/preload/startup.sh [OUTDIR]     (default bench/results/<date>-preload)
#
# Environment: HOOK (default target/release/libgpushare.so), PAIRS (paired starts of /bin/true,
# default 4000; a quarter of that for Python), RUNS (hyperfine runs per
# command and round, default 2000), ROUNDS (alternating rounds, default 3), PYTHON (default
# /usr/bin/python3).
# Writes to OUTDIR:
#   - hyperfine-<round>.json: wall time per start (hyperfine -N, no shell), each round running
#     the four commands in turn, so that a busy machine slows both sides alike;
#   - paired.txt: median start-up time without and with the hook, and the median of the
#     differences of pairs of starts made one right after the other (paired.c), the figure
#     least disturbed by other work on the machine;
#   - instructions.txt: instructions executed per start (valgrind's callgrind), a figure that
#     does not depend on the machine's load;
#   - loaded.txt: the files mapped and the system calls made by /bin/true with the hook
#     preloaded, against without (strace): nothing but the hook itself may be added, and no
#     socket, connect or other file;
#   - summary.txt: medians and the differences, made by summary.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
hook=$(realpath "${HOOK:-$repo/target/release/libgpushare.so}")
runs=${RUNS:-2000}
pairs=${PAIRS:-4000}
rounds=${ROUNDS:-3}
out=${1:-$repo/bench/results/$(date -u +%Y-%m-%d)-preload}
mkdir -p "$out"
[ -f "$hook" ] || { echo "no hook at $hook (cargo build --release -p gpushare-hook)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine is missing (apt-get install hyperfine)" >&2; exit 1; }
# The system Python (a shim on PATH, pyenv's, would be a shell script).
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=$(command -v python3)

{
    echo "# PAIRS=$pairs RUNS=$runs ROUNDS=$rounds HOOK=$hook $0 $*"
    echo "# hook: $hook ($(stat -c %s "$hook") bytes, sha256 $(sha256sum "$hook" | cut -c1-16))"
    echo "# NEEDED: $(readelf -d "$hook" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
    echo "# host: $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# glibc: $(ldd --version | head -1)"
    echo "# python: $("$python" --version 2>&1)"
    echo "# runs $runs x rounds $rounds"
} >"$out/setup.txt"

for r in $(seq "$rounds"); do
    hyperfine -N --style none --warmup 100 --runs "$runs" --export-json "$out/hyperfine-$r.json" \
        -n true "env LD_PRELOAD= /bin/true" \
        -n true+hook "env LD_PRELOAD=$hook /bin/true" \
        -n python "env LD_PRELOAD= $python -c pass" \
        -n python+hook "env LD_PRELOAD=$hook $python -c pass" >/dev/null
done

# Paired runs (bench/preload/paired.c): each start with the hook beside one without.
gcc -O2 -o "$out/.paired" "$here/paired.c"
{
    echo "true: $("$out/.paired" "$pairs" "$hook" /bin/true)"
    echo "python: $("$out/.paired" "$((pairs / 4))" "$hook" "$python" -c pass)"
    # For scale: what preloading any small library (GCC's unwinder, 100 KiB) costs.
    gcc_s=$(gcc -print-file-name=libgcc_s.so.1)
    [ -f "$gcc_s" ] && echo "true with libgcc_s.so.1 instead: $("$out/.paired" "$pairs" "$gcc_s" /bin/true)"
} >"$out/paired.txt"
rm -f "$out/.paired"

if command -v valgrind >/dev/null; then
    : >"$out/instructions.txt"
    for cmd in "/bin/true" "$python -c pass"; do
        for pre in "" "$hook"; do
            # shellcheck disable=SC2086
            n=$(env LD_PRELOAD="$pre" valgrind --tool=callgrind --callgrind-out-file=/dev/null $cmd 2>&1 |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            printf '%s\t%s\t%s\n' "$cmd" "${pre:+hook}" "$n" >>"$out/instructions.txt"
        done
    done
fi

if command -v strace >/dev/null; then
    strace -f -e trace=%file,%network -o "$out/strace-plain.txt" /bin/true
    strace -f -E LD_PRELOAD="$hook" -e trace=%file,%network -o "$out/strace-hook.txt" /bin/true
    {
        echo "## system calls added by the hook (file and network calls of /bin/true)"
        diff <(sed 's/^[0-9]* *//' "$out/strace-plain.txt" | grep -v '^execve(') \
             <(sed 's/^[0-9]* *//' "$out/strace-hook.txt" | grep -v '^execve(') | grep '^[<>]' || true
        echo "## files mapped by python3 -c with the hook and not without"
        diff <(env LD_PRELOAD= "$python" -c 'print(open("/proc/self/maps").read())' | awk 'NF>5 {print $6}' | sort -u) \
             <(env LD_PRELOAD="$hook" "$python" -c 'print(open("/proc/self/maps").read())' | awk 'NF>5 {print $6}' | sort -u) | grep '^[<>]' || true
    } >"$out/loaded.txt"
    rm -f "$out/strace-plain.txt" "$out/strace-hook.txt"
fi

python3 "$here/summary.py" "$out" | tee "$out/summary.txt"
