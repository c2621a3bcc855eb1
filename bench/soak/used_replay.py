"""USED worked out again from a soak seed's daemon trace, two ways, against what each client got:

  used_replay.py SEED_DIR [HOLDING_WINDOW_S]

SEED_DIR is a seed's folder of a soak run with the scheduler traced
(DAEMON_LOG="warn,gpushare::scheduler=debug": gpushared.log.gz) and analysed (windows.jsonl).
From each lease's end line (its wall and busy time, alone or not) it rebuilds the leases, each
process's demand estimate (roughly as src/scheduler/demand.rs keeps it: leases alone set it,
others only lower it) and, per stretch of time between lease starts and ends, what equal turns
by demand give each lease running then (water-filling), at most its busy time; a lease that ran
alone all along counts its busy time. Two demands:
  v0  the demand estimate (the daemon before USED divided it by the share of time holding)
  v1  the demand estimate over the process's share of the last HOLDING_WINDOW_S (1) seconds
      holding leases (at least 0.05), at most 1
It prints, beside the daemon's own USED as traced (used_ms), the mean |USED - got| over all
client-windows (as analyze.py counts it) and each client's mean USED - got over its windows
with work. The rebuilt estimates are not the daemon's: compare v0 with v1, not with the daemon.
"""
import bisect
import datetime
import gzip
import json
import re
import sys
from collections import defaultdict

from analyze import water_fill  # equal turns by demand: equal requests, no limits

d = sys.argv[1]
variant_h_window = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
runs = [json.loads(l) for l in open(f"{d}/runs.jsonl")]
T0 = next(r["t0"] for r in runs if r["mode"] == "gpushare")
wins = [json.loads(l) for l in open(f"{d}/windows.jsonl")]
WIN = wins[0]["t1"] - wins[0]["t0"]

def ts(s):
    return datetime.datetime.strptime(s[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()

kv = re.compile(r'(\w+)=("[^"]*"|\S+)')
leases = []
for line in gzip.open(f"{d}/gpushared.log.gz", "rt"):
    parts = line.split(None, 3)
    if len(parts) < 4 or parts[2] != "end":
        continue
    f = dict(kv.findall(parts[3]))
    t = ts(parts[0]) - T0
    wall = float(f["wall_ms"]) / 1e3
    leases.append(dict(s=int(f["session"]), c=int(f["client"]), start=t - wall, end=t,
                       busy=min(float(f["busy_ms"]) / 1e3, wall), logged=float(f["used_ms"]) / 1e3,
                       alone=f["alone"] == "true", probe=f["probe"] == "true",
                       length=0.005 if f["probe"] == "true" else 0.020))
leases.sort(key=lambda l: l["end"])

# demand estimates per session over time (demand.rs, roughly): alone leases set it, others only lower
est = {}
est_hist = defaultdict(list)  # session -> [(t, estimate)]
for l in leases:
    e = est.get(l["s"], 0.5)
    wall = l["end"] - l["start"]
    w = min(1.0, wall / l["length"])
    if w >= 0.25 and wall > 0:
        sample = l["busy"] / wall
        if l["alone"]:
            g = 0.5 if sample > e else 0.2
            e = e + (sample - e) * g * w
        elif sample < e:
            e = e + (sample - e) * 0.2 * w
    est[l["s"]] = e
    est_hist[l["s"]].append((l["end"], e))

def est_at(s, t):
    h = est_hist[s]
    i = bisect.bisect_right(h, (t, 9)) - 1
    return h[i][1] if i >= 0 else 0.5

# holding per session: sorted intervals
hold = defaultdict(list)
for l in leases:
    hold[l["s"]].append((l["start"], l["end"]))
for s in hold:
    hold[s].sort()
def holding_frac(s, t, span):
    a = t - span
    tot = 0.0
    for (x, y) in hold[s]:
        if y <= a: continue
        if x >= t: break
        tot += min(y, t) - max(x, a)
    return tot / span

events = sorted({l["start"] for l in leases} | {l["end"] for l in leases})
# active leases per stretch via sweep
starts = sorted(range(len(leases)), key=lambda i: leases[i]["start"])
variants = ["v0", "v1"]
acc = {v: [0.0] * len(leases) for v in variants}
crowded = [False] * len(leases)
active = set(); si = 0
ends = sorted(range(len(leases)), key=lambda i: leases[i]["end"]); ei = 0
hcache = {}
for k in range(len(events) - 1):
    t, t2 = events[k], events[k + 1]
    while si < len(starts) and leases[starts[si]]["start"] <= t:
        active.add(starts[si]); si += 1
    while ei < len(ends) and leases[ends[ei]]["end"] <= t:
        active.discard(ends[ei]); ei += 1
    if not active: continue
    ids = sorted(active); dt = t2 - t
    if len(ids) > 1:
        for i in ids: crowded[i] = True
    d0 = [est_at(leases[i]["s"], t) for i in ids]
    key = int(t * 10)
    d1 = []
    for i, e in zip(ids, d0):
        s = leases[i]["s"]
        hk = (s, key)
        if hk not in hcache:
            hcache[hk] = holding_frac(s, key / 10, variant_h_window)
        h = max(hcache[hk], 0.05)
        d1.append(min(1.0, e / h))
    for v, dem in (("v0", d0), ("v1", d1)):
        for i, p in zip(ids, water_fill([(x, 1.0, 1.0) for x in dem])):
            acc[v][i] += p * dt

def used_of(v, i):
    l = leases[i]
    return min(l["busy"], acc[v][i]) if crowded[i] else l["busy"]

# client ids -> names: by matching logged used per window to windows' used
names = sorted({c["name"] for w in wins for c in w["clients"]})
ids = sorted({l["c"] for l in leases})
def per_window(fn):
    out = defaultdict(float)
    for i, l in enumerate(leases):
        u = fn(i); wall = l["end"] - l["start"]
        if u <= 0 or wall <= 0: continue
        a = l["start"]
        while a < l["end"]:
            w = int(a // WIN); b = min(l["end"], (w + 1) * WIN)
            out[(l["c"], w)] += u * (b - a) / wall
            a = b
    return out
logged = per_window(lambda i: leases[i]["logged"])
mapping = {}
for cid in ids:
    best = None
    for n in names:
        err = sum(abs(logged.get((cid, int(w["t0"] // WIN)), 0) / WIN - next(c["used"] for c in w["clients"] if c["name"] == n)) for w in wins)
        if best is None or err < best[0]: best = (err, n)
    mapping[cid] = best[1]
res = {"daemon": logged, "v0": per_window(lambda i: used_of("v0", i)), "v1": per_window(lambda i: used_of("v1", i))}
inv = {n: cid for cid, n in mapping.items()}
print("mapping", mapping)
for name, pw in res.items():
    gaps = []; per = defaultdict(list)
    for w in wins:
        for c in w["clients"]:
            cid = inv.get(c["name"])
            u = pw.get((cid, int(w["t0"] // WIN)), 0) / WIN if cid is not None else 0
            gaps.append(abs(u - c["got"]))
            if c["got"] > 0.01 or u > 0.01: per[c["name"]].append(u - c["got"])
    print(f"{name:7} mean|U-got| {sum(gaps)/len(gaps):.4f}  per client bias", {k: round(sum(v)/len(v), 3) for k, v in sorted(per.items())})
