"""Synthetic soak results, to check analyze.py without a GPU:

  synthetic.py OUTPUT_DIR SEED [SEED...] [--seconds 180] [--short CLIENT:FRACTION:FROM_S]

writes what bench/soak/run.sh would for each SEED (the scenario from scenario.py; solo.jsonl,
runs.jsonl, the processes' progress files under gpushare/ and timeslice/, status.jsonl and
changes.jsonl) from a model of a scheduler that keeps its promise: every 0.1 s each client gets
its water-filled due share of what its working processes demand, split between them by their
demand, with 1% noise; the daemon's USED is what it got. --short makes CLIENT get FRACTION less
than due from FROM_S seconds on (in every seed), a fault analyze.py must find. Time-sliced runs
give every working process an equal slice.
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenario as scen  # noqa: E402
from analyze import water_fill  # noqa: E402

STEP = 0.1
T0 = 1_800_000_000.0  # a fixed absolute start


def solo_of(spec, rng):
    """A made-up solo measurement: busy fraction and GPU seconds per unit by kind."""
    kind = spec.split(":")[0]
    busy = {"kernels": 1.0, "graph": 0.95, "train": 0.4, "mlp": 0.9, "bursty": 0.2, "infer": 0.1}[kind]
    per_unit = {"kernels": 0.002, "graph": 0.005, "train": 0.004, "mlp": 0.0005, "bursty": 0.0016,
                "infer": 0.0006}[kind] * rng.uniform(0.8, 1.2)
    rec = {"kind": "solo", "spec": spec, "rate": busy / per_unit, "busy": busy, "gpu_s_per_unit": per_unit}
    if kind == "infer":
        rec.update(p50_ms=0.4, p99_ms=0.6)
    if kind == "bursty":
        rec.update(bursts=20, burst_x_p50=1.01, burst_x_p90=1.03)
    return rec


def simulate(procs, solo, t0, seconds, times, share_of, faults=None):
    """Progress lines per process: every STEP, each working process's units from its share."""
    units = {p["name"]: 0.0 for p in procs}
    lines = {p["name"]: [] for p in procs}
    t = 0.0
    while t < seconds:
        working = [p for p in procs if times[p["name"]][0] <= t < times[p["name"]][1]]
        shares = share_of(working, t)
        for p in working:
            share = shares[p["name"]] * (faults(p, t) if faults else 1.0)
            units[p["name"]] += share * STEP / solo[p["spec"]]["gpu_s_per_unit"]
        t = round(t + STEP, 6)
        for p in working:
            lines[p["name"]].append({"kind": "progress", "t": round(t0 + t, 4), "units": round(units[p["name"]], 2),
                                     "busy_s": 0.0})
    out = {}
    for p in procs:
        start, end = times[p["name"]]
        head = [{"kind": "start", "t": t0 + start, "name": p["name"], "client": p["client"], "spec": p["spec"]},
                {"kind": "progress", "t": round(t0 + start, 4), "units": 0, "busy_s": 0.0}]
        tail = [{"kind": "end", "t": round(t0 + end, 4), "units": round(units[p["name"]], 2), "name": p["name"]}]
        if p["spec"] == "infer":
            tail[0].update(p50_ms=0.5, p99_ms=0.8)
        if p["spec"].startswith("bursty:"):
            tail[0].update(bursts=40, burst_x_p50=1.5, burst_x_p90=2.5)
        out[p["name"]] = head + lines[p["name"]] + tail
    return out, units


def write_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir")
    p.add_argument("seeds", nargs="+", type=int)
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--timeslice-seconds", type=float, default=40)
    p.add_argument("--short", help="CLIENT:FRACTION:FROM_S, a client that gets less than due")
    a = p.parse_args()
    fault_client, fault_by, fault_from = None, 0.0, 0.0
    if a.short:
        fault_client, by, since = a.short.split(":")
        fault_by, fault_from = float(by), float(since)
    rng = random.Random(0)
    solo = {}
    for seed in a.seeds:
        s = scen.generate(seed, a.seconds, a.timeslice_seconds)
        d = os.path.join(a.dir, f"seed-{seed}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "scenario.json"), "w") as f:
            json.dump(s, f, indent=1)
        with open(os.path.join(d, "scenario.txt"), "w") as f:
            f.write(scen.describe(s) + "\n")
        procs = [dict(p, client=c["name"]) for c in s["clients"] for p in c["procs"]]
        for q in procs:
            solo.setdefault(q["spec"], solo_of(q["spec"], rng))
        clients = {c["name"]: c for c in s["clients"]}
        request = {c["name"]: [(-1.0, c["request"])] for c in s["clients"]}
        for ch in s["changes"]:
            request[ch["client"]].append((ch["t"], ch["request"]))

        def fair(working, t):
            """Each client its water-filled due, split between its processes by demand."""
            names = list(clients)
            demand = {n: sum(solo[q["spec"]]["busy"] for q in working if q["client"] == n) for n in names}
            due = water_fill([(demand[n], clients[n]["limit"], [r for ts, r in request[n] if ts <= t][-1])
                              for n in names])
            due = dict(zip(names, due))
            return {q["name"]: due[q["client"]] * solo[q["spec"]]["busy"] / demand[q["client"]] * rng.gauss(1.0, 0.01)
                    for q in working}

        def fault(q, t):
            return 1.0 - fault_by if q["client"] == fault_client and t >= fault_from else 1.0

        times = {q["name"]: (q["start"], q["end"]) for q in procs}
        files, _ = simulate(procs, solo, T0, a.seconds, times, fair, fault)
        for n, rows in files.items():
            write_jsonl(os.path.join(d, "gpushare", n + ".jsonl"), rows)
        # the daemon's USED: what each client got, as charged GPU time, sampled every second
        status, charged = [], {n: 0.0 for n in clients}
        points = {n: [(r["t"], r["units"]) for r in rows if r["kind"] == "progress"] for n, rows in files.items()}
        for k in range(int(a.seconds) + 3):
            t = T0 - 1 + k
            for n in clients:
                charged[n] = sum(_at(points[q["name"]], t) * solo[q["spec"]]["gpu_s_per_unit"]
                                 for q in procs if q["client"] == n)
            status.append({"t": t, "leases": "together", "config_error": "",
                           "clients": [{"name": n, "request": [r for ts, r in request[n] if ts <= t - T0][-1],
                                        "limit": clients[n]["limit"], "charged_ns": int(charged[n] * 1e9)}
                                       for n in clients]})
        write_jsonl(os.path.join(d, "status.jsonl"), status)
        write_jsonl(os.path.join(d, "changes.jsonl"),
                    [{"change": k + 1, "client": ch["client"], "request": ch["request"], "t": T0 + ch["t"],
                      "applied": True, "seen_request": ch["request"], "config_error": ""}
                     for k, ch in enumerate(s["changes"])])
        # time-sliced: every working process an equal slice of the GPU
        t1 = T0 + a.seconds + 100
        ts_times = {q["name"]: (q["ts_start"], q["ts_end"]) for q in procs}

        def equal(working, t):
            return {q["name"]: min(solo[q["spec"]]["busy"], 1.0 / len(working)) for q in working}
        files, _ = simulate(procs, solo, t1, a.timeslice_seconds, ts_times, equal)
        for n, rows in files.items():
            write_jsonl(os.path.join(d, "timeslice", n + ".jsonl"), rows)
        write_jsonl(os.path.join(d, "runs.jsonl"),
                    [{"mode": "gpushare", "t0": T0, "seconds": a.seconds, "lead": 12},
                     {"mode": "timeslice", "t0": t1, "seconds": a.timeslice_seconds, "lead": 12}])
    write_jsonl(os.path.join(a.dir, "solo.jsonl"), list(solo.values()))


def _at(points, t):
    """Units done at time t (0 before the first point, the last after the last)."""
    done = 0.0
    for pt, u in points:
        if pt > t:
            break
        done = u
    return done


if __name__ == "__main__":
    main()
