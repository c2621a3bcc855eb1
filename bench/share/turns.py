"""What each process of a shared phase held, second by second, beside what it made of it: the
scheduler's division of the time apart from what each process does in its turns.

  python3 turns.py DAEMON_LOG SWEEP_JSONL PHASE

DAEMON_LOG is the phase's gpushared log at the trace level (sweep.sh with DAEMON_LOG=trace; a
log of several daemons, one after another, is cut at each start, and the one whose leases cover
the phase is read), SWEEP_JSONL the sweep's output, PHASE a shared phase in it (e.g.
transformer.gpushare). Each job is matched to its process by its client's name (the sweep's
jobs are named after their clients). For every whole second of the span all jobs ran, and for
the span: each process's part of the second holding a lease, its progress (steps or kernels),
and that progress over the time it held (its rate in its turns, to set beside its solo rate);
then the part held by two or more at once and the part nobody held. Compressed files (.xz,
.gz) are read as they are.
"""
import datetime
import json
import re
import sys

from analyze import done_at, open_text


def stamp(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def daemons(path):
    """The log cut at each daemon's start: lists of (time, message)."""
    runs, run = [], []
    for line in open_text(path):
        m = re.match(r"(\S+)\s+\w+\s+(.*)", line)
        if not m or not m.group(1)[:4].isdigit():
            continue
        if "listening for CUDA processes" in m.group(2) and run:
            runs.append(run)
            run = []
        run.append((stamp(m.group(1)), m.group(2)))
    if run:
        runs.append(run)
    return runs


def leases(run):
    """Client name by session, and each session's (start, end) leases, from grants to releases."""
    names, held, since = {}, {}, {}
    for t, msg in run:
        a = re.search(r"process attached .* client=(\S+) session=(\d+)", msg)
        if a:
            names[a.group(2)] = a.group(1)
            continue
        g = re.match(r"grant .*session=(\d+) ", msg)
        if g:
            since.setdefault(g.group(1), t)
            continue
        r = re.match(r"request session=(\d+) request=(Release|Renew)", msg)
        if r and r.group(1) in since:
            held.setdefault(r.group(1), []).append((since.pop(r.group(1)), t))
    return names, held


def overlap(spans, a, b):
    return sum(max(0.0, min(e, b) - max(s, a)) for s, e in spans)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    log, jsonl, phase = sys.argv[1:]
    jobs = {}
    for line in open_text(jsonl):
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("phase") == phase and r.get("samples"):
                jobs[r["name"]] = r["samples"]
    if not jobs:
        sys.exit(f"no jobs of phase {phase} in {jsonl}")
    t0 = max(s[0][0] for s in jobs.values()) + 1.0
    t1 = min(s[-1][0] for s in jobs.values()) - 0.5
    best = None
    for run in daemons(log):
        names, held = leases(run)
        by_name = {names.get(s): spans for s, spans in held.items() if names.get(s) in jobs}
        cover = sum(overlap(spans, t0, t1) for spans in by_name.values())
        if by_name and (best is None or cover > best[0]):
            best = (cover, by_name)
    if best is None:
        sys.exit(f"no leases of {sorted(jobs)} in {log}")
    held = best[1]
    names = sorted(jobs)

    def second(a, b):
        cols = []
        for n in names:
            h = overlap(held.get(n, []), a, b)
            made = done_at(jobs[n], b) - done_at(jobs[n], a)
            cols.append((h, made))
        # two or more at once, and nobody: from the leases' edges
        edges = sorted({a, b} | {x for n in names for s in held.get(n, []) for x in s if a < x < b})
        both = idle = 0.0
        for x, y in zip(edges, edges[1:]):
            m = (x + y) / 2
            k = sum(any(s <= m < e for s, e in held.get(n, [])) for n in names)
            both += (y - x) if k > 1 else 0.0
            idle += (y - x) if k == 0 else 0.0
        return cols, both, idle

    head = "  ".join(f"{n}: held  made  in turn" for n in names)
    print(f"second  {head}  together  nobody")
    t = t0
    while t + 1.0 <= t1:
        cols, both, idle = second(t, t + 1.0)
        row = "  ".join(f"{n}: {h:5.3f} {m:5.1f} {m / h if h else 0:7.1f}" for n, (h, m) in zip(names, cols))
        print(f"{t - t0:6.0f}  {row}  {both:8.3f}  {idle:6.3f}")
        t += 1.0
    cols, both, idle = second(t0, t1)
    span = t1 - t0
    for n, (h, m) in zip(names, cols):
        print(f"{n}: held {h / span:.3f} of {span:.1f} s, made {m / span:.1f}/s, {m / h if h else 0:.1f}/s in its turns")
    print(f"together {both / span:.3f}, nobody {idle / span:.3f}")


if __name__ == "__main__":
    main()
