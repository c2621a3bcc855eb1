"""Windows, due shares and a summary of a soak (bench/soak/run.sh):

  analyze.py OUTPUT_DIR [--window 5] [--settle 1] [--referee PATH]

For each OUTPUT_DIR/seed-N of the run under gpushare, per WINDOW-second window from its start and
per client:
  demand   what its processes would keep busy alone: the sum over its processes of their solo
           busy fraction times the fraction of the window they were working; for a bursty job
           that writes its bursts, what it would have kept busy alone at the pace of its own
           pauses: per burst and the pause after it, the burst's time alone over that time plus
           the pause, counted over the part of the window the two cover (Proc.bursting); a
           process that wrote no progress at all (it never got to work) is counted working over
           the part of the run its scenario gave it, so that a starved process is still due its
           share (and got none of it)
  got      what it got, in solo-equivalent GPU time: the sum over its processes of the units they
           finished in the window times their solo GPU seconds per unit, over the window
  used     the daemon's own USED: the GPU time its work took in the window by the daemon's
           count (status.jsonl's gpu_time_ns; charged_ns, the charge, where a daemon older than
           the split of USED from the charges wrote no gpu_time_ns), over the window
  request, limit, interactive   in force at the window's middle (after the share changes)
and since_change: seconds from the last change (a process starting or stopping work, a share
change) to the window's start, 0 where one falls inside the window. These go to
seed-N/windows.jsonl, one window a line:
  {"seed": N, "t0": .., "t1": .., "since_change": s,
   "clients": [{"name", "request", "limit", "interactive", "demand", "got", "used"}],
   "sliced": T}
with T, where the seed ran time-sliced too, the clients' got added up over the same part of the
mix there (its run is shorter: the same fractions of it): the referee then divides what the mix
could use, the larger of T and what the clients got here, instead of the whole GPU.
Where the referee exists (--referee, default $TARGET/gpushare-referee, else
target/release/gpushare-referee), windows.jsonl is piped through it into seed-N/verdicts.jsonl.
Each client's due share comes from verdicts.jsonl where it exists (`due` per window and client),
else from water-filling here: each client is due min(demand, limit) at most; the GPU is divided in
proportion to the requests (at least 0.01 each) among clients still below that, those that reach
it hand back the rest, and so on.

Writes seed-N/summary.json (the windows most short of their due, |USED - got|, the throughput
under gpushare over the time-sliced run's, inference latencies) and, over all seeds,
OUTPUT_DIR/summary.json, summary.md and, where matplotlib is installed, got_vs_due.png.
Throughput: per process its units over the time it worked, over its solo rate; summed over the
processes that ran in both runs, the gpushare run's sum over the time-sliced run's.
"""
import argparse
import glob
import json
import lzma
import math
import os
import subprocess
import sys
from collections import defaultdict

SHORT = 0.03  # 3 points of the GPU


def read_jsonl(path):
    """The JSON objects of a .jsonl file, or of its compressed copy PATH.xz where only that is
    kept (bench/results keeps raw output over 150 kB compressed)."""
    if os.path.exists(path):
        f = open(path)
    elif os.path.exists(path + ".xz"):
        f = lzma.open(path + ".xz", "rt")
    else:
        return []
    out = []
    with f:
        for line in f:
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def interp(points, t):
    """The value at time t of a series of (time, value) points, linear between them and held
    beyond its ends; None for an empty series."""
    if not points:
        return None
    if t <= points[0][0]:
        return points[0][1]
    for (ta, va), (tb, vb) in zip(points, points[1:]):
        if t <= tb:
            return va + (vb - va) * (t - ta) / (tb - ta) if tb > ta else vb
    return points[-1][1]


def water_fill(clients):
    """Due shares: [(demand, limit, request)] -> [due]."""
    cap = [max(0.0, min(d, lim)) for d, lim, _ in clients]
    due = [0.0] * len(clients)
    open_ = {i for i, c in enumerate(cap) if c > 1e-9}
    left = 1.0
    while open_ and left > 1e-9:
        weight = {i: max(clients[i][2], 0.01) for i in open_}
        total = sum(weight.values())
        full = [i for i in open_ if due[i] + left * weight[i] / total >= cap[i]]
        if not full:
            for i in open_:
                due[i] += left * weight[i] / total
            break
        for i in full:  # capped at their demand or limit: the rest goes round again
            left -= cap[i] - due[i]
            due[i] = cap[i]
            open_.discard(i)
    return due


class Proc:
    """One process's progress file: when it worked and how many units it had done when."""

    def __init__(self, path):
        self.name = os.path.basename(path)[: -len(".jsonl")]
        self.start = self.end = None
        self.points = []
        self.bursts = []  # a bursty job's (start, end, slowdown)
        for r in read_jsonl(path):
            if r.get("kind") == "start":
                self.start = r
            elif r.get("kind") == "progress":
                self.points.append((r["t"], r["units"]))
            elif r.get("kind") == "burst":
                self.bursts.append((r["t0"], r["t1"], r["x"]))
            elif r.get("kind") == "end":
                self.end = r
        self.spec = (self.start or {}).get("spec")
        self.working = (self.points[0][0], self.points[-1][0]) if len(self.points) > 1 else None

    @classmethod
    def planned(cls, name, spec, start, end):
        """A process that wrote no progress (it never got to work): working, with nothing done,
        over the part of the run its scenario gave it, so that it is still due its share."""
        p = cls.__new__(cls)
        p.name, p.spec, p.start, p.end = name, spec, None, None
        p.points, p.bursts, p.working = [], [], (start, end)
        return p

    def units(self, a, b):
        if not self.points:
            return 0.0
        return interp(self.points, b) - interp(self.points, a)

    def alive(self, a, b):
        """The fraction of [a, b] it was working."""
        if not self.working:
            return 0.0
        return max(0.0, min(b, self.working[1]) - max(a, self.working[0])) / (b - a)

    def bursting(self, a, b):
        """What a bursty job (that wrote its bursts) would have kept busy alone over [a, b], at the
        pace of the pauses it took: each burst and the pause after it (up to the next burst) is
        a cycle, busy for its burst's time alone (its wall time over its slowdown) out of that
        time plus the pause; each cycle counts by the part of [a, b] it covers. A burst slowed
        down does not want more of the GPU for being slow (its wall time in bursts did: a job
        held to its limit of 0.35 while it burst, 35% of the time, looked due 0.35 of the GPU),
        and a burst that waited is still due what it would have used."""
        total = 0.0
        for i, (t0, t1, x) in enumerate(self.bursts):
            alone = (t1 - t0) / x if x > 0 else t1 - t0
            if i + 1 < len(self.bursts):
                end, busy = self.bursts[i + 1][0], alone / (alone + self.bursts[i + 1][0] - t1)
            else:  # the last burst: no pause known after it
                end, busy = t0 + alone, 1.0
            total += busy * max(0.0, min(b, end) - max(a, t0))
        return total / (b - a)

    def rate(self, t0, t1):
        """Units per second over the time it worked within [t0, t1]."""
        if not self.working:
            return None
        a, b = max(t0, self.working[0]), min(t1, self.working[1])
        return self.units(a, b) / (b - a) if b - a > 1.0 else None


def load_procs(d):
    return {p.name: p for p in map(Proc, sorted(glob.glob(os.path.join(d, "*.jsonl"))))}


def find_referee(path):
    """The referee program: `path`, else $TARGET's, else the repository's target/release one."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    candidates = [path, os.environ.get("TARGET") and os.path.join(os.environ["TARGET"], "gpushare-referee"),
                  os.path.join(repo, "target", "release", "gpushare-referee")]
    return next((p for p in candidates if p and os.path.isfile(p) and os.access(p, os.X_OK)), None)


def verdict_dues(path, windows):
    """(window index, client) -> due from the referee's lines: one per window with a `clients`
    list, or one per window and client; a line finds its window by t0 (else by `window`, an index)."""
    by_t0 = {round(w["t0"], 3): i for i, w in enumerate(windows)}
    dues = {}
    for r in read_jsonl(path):
        i = by_t0.get(round(r["t0"], 3)) if isinstance(r.get("t0"), (int, float)) else r.get("window")
        for c in r["clients"] if isinstance(r.get("clients"), list) else [r]:
            name = c.get("name", c.get("client"))
            if i is not None and name is not None and isinstance(c.get("due"), (int, float)):
                dues[(i, name)] = c["due"]
    return dues


def seed_order(d):
    """Seeds in numeric order, then cells by name."""
    name = d.rsplit("seed-", 1)[1]
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def analyze_seed(d, solo, a):
    scenario = json.load(open(os.path.join(d, "scenario.json")))
    seed = scenario["seed"]
    runs = {r["mode"]: r for r in read_jsonl(os.path.join(d, "runs.jsonl"))}
    out = {"seed": seed, "errors": [r.get("error") for r in read_jsonl(os.path.join(d, "errors.jsonl"))]}
    if "gpushare" not in runs:
        out["errors"].append("no run under gpushare")
        return out, []
    t0, span = runs["gpushare"]["t0"], runs["gpushare"]["seconds"]
    procs = load_procs(os.path.join(d, "gpushare"))
    owner = {p["name"]: c["name"] for c in scenario["clients"] for p in c["procs"]}
    spec_of = {p["name"]: p["spec"] for c in scenario["clients"] for p in c["procs"]}
    leaves_early = {p["name"] for c in scenario["clients"] for p in c["procs"] if p["end"] < scenario["seconds"]}
    missing = sorted({spec_of[n] for n in procs if spec_of.get(n) not in solo})
    if missing:
        out["errors"].append("no solo measurement of %s: their processes are left out" % ", ".join(missing))
    planned = {p["name"]: (t0 + p["start"], t0 + p["end"]) for c in scenario["clients"] for p in c["procs"]}
    for n in spec_of:
        if n not in procs or not procs[n].working:
            out["errors"].append(f"process {n} ({spec_of[n]}) did no work under gpushare")
            procs[n] = Proc.planned(n, spec_of[n], *planned[n])

    # share changes (in force from the signal, where the daemon took them) and the other changes
    changes = read_jsonl(os.path.join(d, "changes.jsonl"))
    shares = {c["name"]: [(-math.inf, c["request"])] for c in scenario["clients"]}
    events = []
    for ch in changes:
        if ch.get("applied"):
            shares[ch["client"]].append((ch["t"], ch["request"]))
            events.append(ch["t"])
        else:
            out["errors"].append(f"share change {ch} not applied")
    for p in procs.values():
        if p.working:
            events += [p.working[0]] + ([p.working[1]] if p.name in leaves_early else [])
    used = {}
    for s in read_jsonl(os.path.join(d, "status.jsonl")):
        for c in s.get("clients", []):
            ns = c["gpu_time_ns"] if "gpu_time_ns" in c else c.get("charged_ns")
            used.setdefault(c["name"], []).append((s["t"], ns or 0))

    # the same part of the mix under plain time-slicing (its run is shorter, its times scaled):
    # what the mix could use there, for the referee's capacity
    ts_procs = load_procs(os.path.join(d, "timeslice")) if "timeslice" in runs else {}

    def sliced(fa, fb):
        ta, tspan = runs["timeslice"]["t0"], runs["timeslice"]["seconds"]
        xa, xb = ta + fa * tspan, ta + fb * tspan
        got = sum(p.units(xa, xb) * solo[spec_of[n]]["gpu_s_per_unit"]
                  for n, p in ts_procs.items() if p.working and spec_of.get(n) in solo)
        return round(got / (xb - xa), 4)

    windows = []
    proc_got = defaultdict(list)  # a process's got in the windows where all of its client's work
    for k in range(int(span // a.window)):
        wa, wb = t0 + k * a.window, t0 + (k + 1) * a.window
        before = [e for e in events if e <= wb]
        since = max(0.0, wa - max(before)) if before else wa - t0
        clients = []
        for c in scenario["clients"]:
            demand = got = 0.0
            mine = {}
            for n, p in procs.items():
                if owner.get(n) != c["name"] or spec_of[n] not in solo:
                    continue
                s = solo[spec_of[n]]
                demand += p.bursting(wa, wb) if p.bursts else s["busy"] * p.alive(wa, wb)
                g = p.units(wa, wb) * s["gpu_s_per_unit"] / a.window if p.working else 0.0
                got += g
                mine[n] = (g, p.alive(wa, wb))
            if len(mine) > 1 and all(alive >= 1.0 for _, alive in mine.values()):
                for n, (g, _) in mine.items():
                    proc_got[n].append(g)
            series = used.get(c["name"], [])
            u = None
            if series and series[0][0] <= wa + 1.0 and series[-1][0] >= wb - 1.0:
                u = (interp(series, wb) - interp(series, wa)) / 1e9 / a.window
                u = u if u >= 0 else None  # a counter that went back (a restarted daemon)
            request = [r for t, r in shares[c["name"]] if t <= (wa + wb) / 2][-1]
            clients.append({"name": c["name"], "request": request, "limit": c["limit"],
                            "interactive": c["interactive"], "demand": round(demand, 4),
                            "got": round(got, 4), "used": None if u is None else round(u, 4)})
        w = {"seed": seed, "t0": round(wa - t0, 3), "t1": round(wb - t0, 3),
             "since_change": round(since, 3), "clients": clients}
        if ts_procs:
            w["sliced"] = sliced((wa - t0) / span, (wb - t0) / span)
        windows.append(w)
    wpath = os.path.join(d, "windows.jsonl")
    text = "".join(json.dumps(w) + "\n" for w in windows)
    if not os.path.exists(wpath) or open(wpath).read() != text:  # unchanged: verdicts on it stay valid
        with open(wpath, "w") as f:
            f.write(text)

    # due shares: the referee's, else water-filling
    vpath = os.path.join(d, "verdicts.jsonl")
    referee = find_referee(a.referee)
    if referee:
        with open(wpath) as fin, open(vpath, "w") as fout:
            r = subprocess.run([referee], stdin=fin, stdout=fout, stderr=subprocess.PIPE, text=True, timeout=120)
        # exit 1: a judged window broke the promise (the tables below say which); 2: bad input
        if r.returncode not in (0, 1):
            out["errors"].append(f"{referee} exited with {r.returncode}: {r.stderr.strip()[-300:]}")
    dues = {}
    if os.path.exists(vpath):
        if os.path.getmtime(vpath) >= os.path.getmtime(wpath):
            dues = verdict_dues(vpath, windows)
        else:
            out["errors"].append("verdicts.jsonl is older than windows.jsonl: left aside")
    out["due_from"] = "verdicts.jsonl" if dues else "water-filling"
    rows = []
    for i, w in enumerate(windows):
        fill = water_fill([(c["demand"], c["limit"], c["request"]) for c in w["clients"]])
        for c, f in zip(w["clients"], fill):
            due = dues.get((i, c["name"]), f) if dues else f
            rows.append({"seed": seed, "t0": w["t0"], "client": c["name"], "interactive": c["interactive"],
                         "request": c["request"], "limit": c["limit"], "demand": c["demand"], "due": round(due, 4),
                         "got": c["got"], "short": round(due - c["got"], 4), "used": c["used"],
                         "since_change": w["since_change"]})

    settled = [r for r in rows if r["since_change"] >= a.settle]
    out.update({
        "windows": len(windows), "client_windows": len(rows), "settled_client_windows": len(settled),
        "short_over_3_points": sum(r["short"] > SHORT for r in rows),
        "settled_short_over_3_points": sum(r["short"] > SHORT for r in settled),
        "worst": sorted(rows, key=lambda r: -r["short"])[:10],
        "worst_settled": sorted(settled, key=lambda r: -r["short"])[:5],
    })
    gaps = [dict(r, gap=round(abs(r["used"] - r["got"]), 4)) for r in rows if r["used"] is not None]
    if gaps:
        out["used_vs_got"] = {"mean_abs": round(sum(g["gap"] for g in gaps) / len(gaps), 4),
                              "max_abs": max(g["gap"] for g in gaps),
                              "worst": sorted(gaps, key=lambda g: -g["gap"])[:5],
                              "by_client": by_client(rows)}
    if proc_got:
        out["within_clients"] = {n: {"spec": spec_of[n], "windows": len(v),
                                     "got": round(sum(v) / len(v), 4)}
                                 for n, v in sorted(proc_got.items())}
    out["throughput"] = throughput(d, runs, procs, spec_of, solo)
    out["latency"] = latency(d, scenario, procs, solo)
    out["bursts"] = bursts(d, scenario, procs, solo, rows, shares)
    out["changes"] = changes
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out, rows


def throughput(d, runs, procs, spec_of, solo):
    """Per process its rate over its solo rate in each run; the sums and their ratio."""
    if "timeslice" not in runs:
        return None
    ts = load_procs(os.path.join(d, "timeslice"))
    per, sums = {}, [0.0, 0.0]
    for n, p in procs.items():
        s = solo.get(spec_of.get(n))
        if not s or n not in ts:
            continue
        g = p.rate(runs["gpushare"]["t0"], runs["gpushare"]["t0"] + runs["gpushare"]["seconds"])
        t = ts[n].rate(runs["timeslice"]["t0"], runs["timeslice"]["t0"] + runs["timeslice"]["seconds"])
        if g is None or t is None:
            continue
        per[n] = {"spec": spec_of[n], "gpushare": round(g / s["rate"], 4), "timeslice": round(t / s["rate"], 4)}
        sums[0] += g / s["rate"]
        sums[1] += t / s["rate"]
    return {"gpushare": round(sums[0], 4), "timeslice": round(sums[1], 4),
            "ratio": round(sums[0] / sums[1], 4) if sums[1] else None, "processes": per}


def latency(d, scenario, procs, solo):
    """Per inference process its latency percentiles: solo, under gpushare, time-sliced."""
    ts = load_procs(os.path.join(d, "timeslice"))
    out = {}
    for c in scenario["clients"]:
        for n in (p["name"] for p in c["procs"] if p["spec"] == "infer"):
            row = {"client": c["name"], "interactive": c["interactive"],
                   "solo_p99_ms": (solo.get("infer") or {}).get("p99_ms")}
            for mode, ps in (("gpushare", procs), ("timeslice", ts)):
                end = ps[n].end if n in ps else None
                if end:
                    row[f"{mode}_p50_ms"], row[f"{mode}_p99_ms"] = end.get("p50_ms"), end.get("p99_ms")
            out[n] = row
    return out


def pct(xs, q):
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else None


def bursts(d, scenario, procs, solo, rows, shares):
    """Per bursty process its bursts' slowdowns (wall time over the kernels' time alone), p50 and
    p90: solo (bursts back to back), under gpushare, time-sliced; with its client's request and
    mean got, to tell the bursts of a client below its request (which should run as if alone)
    from the others."""
    ts = load_procs(os.path.join(d, "timeslice"))
    out = {}
    for c in scenario["clients"]:
        got = [r["got"] for r in rows if r["client"] == c["name"] and r["got"] is not None]
        for p in c["procs"]:
            if not p["spec"].startswith("bursty:"):
                continue
            n = p["name"]
            s = solo.get(p["spec"]) or {}
            row = {"client": c["name"], "request": c["request"],
                   "client_got_mean": round(sum(got) / len(got), 4) if got else None,
                   "solo_p50": s.get("burst_x_p50")}
            for mode, ps in (("gpushare", procs), ("timeslice", ts)):
                end = ps[n].end if n in ps else None
                if end:
                    row[f"{mode}_bursts"] = end.get("bursts")
                    row[f"{mode}_p50"], row[f"{mode}_p90"] = end.get("burst_x_p50"), end.get("burst_x_p90")
            if n in procs and procs[n].bursts:  # under gpushare, by the client's request at each burst
                phases = {}
                for t0, _, x in procs[n].bursts:
                    phases.setdefault([r for t, r in shares[c["name"]] if t <= t0][-1], []).append(x)
                row["by_request"] = [{"request": r, "bursts": len(xs), "p50": pct(xs, 0.5), "p90": pct(xs, 0.9)}
                                     for r, xs in phases.items()]
            out[n] = row
    return out


def fmt(x, n=3):
    return "-" if x is None else f"{x:.{n}f}"


def markdown(summaries, scenarios, a):
    md = ["# Soak", "",
          f"Windows of {a.window:g} s; due from the referee's verdicts where they exist, else by water-filling; "
          f"settled: at least {a.settle:g} s after the last change; short: due - got over 3 points.", "",
          "| seed | clients | processes | client-windows | short | settled short | worst short "
          "| mean abs USED-got | throughput vs time-sliced |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summaries:
        sc = scenarios[s["seed"]]
        worst = s.get("worst") or [{}]
        md.append(f"| {s['seed']} | {len(sc['clients'])} | {sum(len(c['procs']) for c in sc['clients'])} | "
                  f"{s.get('client_windows', 0)} | {s.get('short_over_3_points', '-')} | "
                  f"{s.get('settled_short_over_3_points', '-')} | {fmt(worst[0].get('short'))} | "
                  f"{fmt((s.get('used_vs_got') or {}).get('mean_abs'))} | "
                  f"{fmt((s.get('throughput') or {}).get('ratio'))} |")
    for s in summaries:
        scenario_txt = open(os.path.join(a.dir, f"seed-{s['seed']}", "scenario.txt")).read().rstrip()
        md += ["", f"## Seed {s['seed']}", "", "```", scenario_txt, "```", ""]
        for e in s["errors"]:
            md.append(f"- {e}")
        for title, key in (("Most short of their due", "worst"),
                           (f"Most short of their due, at least {a.settle:g} s after a change", "worst_settled")):
            md += ["", f"{title} (due from {s.get('due_from', '-')}; (i): interactive):", "",
                   "| t0 | client | request | limit | demand | due | got | short | USED | since change |",
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in s.get(key, []):
                md.append(f"| {r['t0']:g} | {r['client']}{' (i)' if r['interactive'] else ''} | {r['request']:.2f} | "
                          f"{r['limit']:.2f} | {fmt(r['demand'])} | {fmt(r['due'])} | {fmt(r['got'])} | "
                          f"{fmt(r['short'])} | {fmt(r['used'])} | {r['since_change']:g} |")
        u = s.get("used_vs_got")
        if u:
            md += ["", f"|USED - got|: mean {fmt(u['mean_abs'])}, max {fmt(u['max_abs'])} "
                   + "(" + ", ".join(f"{w['client']} at {w['t0']:g} s: USED {fmt(w['used'])}, got {fmt(w['got'])}"
                                     for w in u["worst"][:3]) + ")"]
            if u.get("by_client"):
                md += ["", "USED - got per client, mean over its windows with work: "
                       + ", ".join(f"{n} {v:+.3f}" for n, v in u["by_client"].items())]
        wc = s.get("within_clients")
        if wc:
            md += ["", "Each process of a client of several, mean got over the windows all of them "
                   "worked through: " + ", ".join(f"{n} ({v['spec']}) {fmt(v['got'])}"
                                                    for n, v in wc.items())]
        tp = s.get("throughput")
        if tp:
            md += ["", f"Throughput (sum of rates over solo rates): gpushare {fmt(tp['gpushare'])}, "
                   f"time-sliced {fmt(tp['timeslice'])}, ratio **{fmt(tp['ratio'])}**"]
        if s.get("latency"):
            md += ["", "| inference | class | solo p99 ms | gpushare p50 / p99 ms | time-sliced p50 / p99 ms |",
                   "| --- | --- | --- | --- | --- |"]
            for n, r in s["latency"].items():
                md.append(f"| {n} | {'interactive' if r['interactive'] else 'batch'} | {fmt(r['solo_p99_ms'], 2)} | "
                          f"{fmt(r.get('gpushare_p50_ms'), 2)} / {fmt(r.get('gpushare_p99_ms'), 2)} | "
                          f"{fmt(r.get('timeslice_p50_ms'), 2)} / {fmt(r.get('timeslice_p99_ms'), 2)} |")
        if s.get("bursts"):
            md += ["", "Bursts, wall time over the kernels' time alone:", "",
                   "| bursty | client | request | client got (mean) | solo p50 | gpushare p50 / p90 "
                   "| time-sliced p50 / p90 |",
                   "| --- | --- | --- | --- | --- | --- | --- |"]
            for n, r in s["bursts"].items():
                md.append(f"| {n} | {r['client']} | {r['request']:.2f} | {fmt(r['client_got_mean'])} | "
                          f"{fmt(r['solo_p50'], 2)} | {fmt(r.get('gpushare_p50'), 2)} / {fmt(r.get('gpushare_p90'), 2)} | "
                          f"{fmt(r.get('timeslice_p50'), 2)} / {fmt(r.get('timeslice_p90'), 2)} |")
            for n, r in s["bursts"].items():
                if r.get("by_request"):
                    md.append("")
                    md.append(f"{n} under gpushare by its client's request: " + "; ".join(
                        f"{p['request']:.2f}: p50 {fmt(p['p50'], 2)}, p90 {fmt(p['p90'], 2)} ({p['bursts']} bursts)"
                        for p in r["by_request"]))
        if s.get("changes"):
            md += ["", "Share changes: " + "; ".join(
                f"{c['client']} request {c['request']:.2f} ({'applied' if c.get('applied') else 'NOT applied'})"
                for c in s["changes"])]
    return "\n".join(md) + "\n"


def plot(rows, path, window, settle):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.5, 6))
    for label, pick, color in (("within %g s of a change" % settle, lambda r: r["since_change"] < settle, "tab:orange"),
                               ("settled", lambda r: r["since_change"] >= settle, "tab:blue")):
        for inter, marker in ((False, "o"), (True, "^")):
            sel = [r for r in rows if pick(r) and r["interactive"] == inter]
            if sel:
                ax.scatter([r["due"] for r in sel], [r["got"] for r in sel], s=9, alpha=0.5, color=color,
                           marker=marker, label=label + (", interactive" if inter else ""))
    top = max([1.0] + [max(r["due"], r["got"]) for r in rows])
    ax.plot([0, top], [0, top], color="black", lw=0.8, label="got = due")
    ax.plot([SHORT, top], [0, top - SHORT], color="red", lw=0.8, ls="--", label="due - 3 points")
    ax.set_xlabel("due share")
    ax.set_ylabel("got (solo-equivalent GPU time)")
    ax.set_title(f"gpushare soak: every client and {window:g} s window")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def by_client(rows):
    """Each client's mean USED - got over its windows with work (got or USED over 0.01)."""
    per = defaultdict(list)
    for r in rows:
        if r["used"] is not None and (r["got"] > 0.01 or r["used"] > 0.01):
            per[r["client"]].append(r["used"] - r["got"])
    return {n: round(sum(v) / len(v), 4) for n, v in sorted(per.items())}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--settle", type=float, default=1.0,
                   help="seconds after a change before a window counts as settled")
    p.add_argument("--referee",
                   help="the referee program (default: $TARGET/gpushare-referee, target/release/gpushare-referee)")
    a = p.parse_args()
    solo = {r["spec"]: r for r in read_jsonl(os.path.join(a.dir, "solo.jsonl")) if r.get("kind") == "solo"}
    summaries, scenarios, rows = [], {}, []
    seed_dirs = glob.glob(os.path.join(a.dir, "seed-*", "scenario.json"))
    for d in sorted((os.path.dirname(x) for x in seed_dirs), key=seed_order):
        s, r = analyze_seed(d, solo, a)
        scenarios[s["seed"]] = json.load(open(os.path.join(d, "scenario.json")))
        summaries.append(s)
        rows += r
    if not summaries:
        sys.exit(f"analyze.py: no seed-N/scenario.json in {a.dir}")
    with open(os.path.join(a.dir, "summary.md"), "w") as f:
        f.write(markdown(summaries, scenarios, a))
    plotted = plot(rows, os.path.join(a.dir, "got_vs_due.png"), a.window, a.settle)
    overall = {"seeds": [s["seed"] for s in summaries], "client_windows": len(rows),
               "short_over_3_points": sum(r["short"] > SHORT for r in rows),
               "settled_short_over_3_points": sum(r["short"] > SHORT and r["since_change"] >= a.settle
                                                  for r in rows),
               "worst": sorted(rows, key=lambda r: -r["short"])[:10], "plot": plotted,
               "throughput_ratios": {s["seed"]: (s.get("throughput") or {}).get("ratio") for s in summaries}}
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump(overall, f, indent=1)
    for s in summaries:
        w = (s.get("worst") or [{}])[0]
        print(f"seed {s['seed']}: {s.get('client_windows', 0)} client-windows, {s.get('short_over_3_points', '-')} "
              f"short by over 3 points ({s.get('settled_short_over_3_points', '-')} settled); worst "
              f"{w.get('client', '-')} at {w.get('t0', '-')} s: due {fmt(w.get('due'))} got {fmt(w.get('got'))}; "
              f"|USED-got| mean {fmt((s.get('used_vs_got') or {}).get('mean_abs'))}; throughput vs time-sliced "
              f"{fmt((s.get('throughput') or {}).get('ratio'))}"
              + (f"; {len(s['errors'])} errors" if s["errors"] else ""))
    print(f"summary: {os.path.join(a.dir, 'summary.md')}"
          + (", got_vs_due.png" if plotted else " (no matplotlib: no plot)"))


if __name__ == "__main__":
    main()
