"""Randomized soak scenarios for gpushare, one per seed (bench/soak/run.sh):

  scenario.py SEED [--seconds S] [--timeslice-seconds T] [--dir DIR]

SEED is a number, or the name of a hand-written mix in cells/NAME.json (a *cell*: a mix that a
seed showed, cut down to what it is about, or its control without one of its clients). A cell
gives what a seed draws, `clients` (each with `name`, `user`, `interactive`, `request`, `limit`
and `procs`, each process a `spec` and its `start` and `end` as fractions of the run) and
`changes` (`t` as a fraction of the run, `client`, `request`), and replays the same way.

prints the scenario: its clients (request, limit, class, memory cap, Unix user) and each one's
processes (workload, start and end), and the share changes at run time. With --dir it also writes
  DIR/scenario.json      the scenario
  DIR/scenario.txt       what it printed
  DIR/clients.toml       the [clients.*] tables of the daemon's config
  DIR/clients.changeK.toml  the same after the Kth share change
  DIR/plan.tsv           for run.sh, one line per process and per change (tab-separated):
                           proc NAME CLIENT USER SPEC START END TS_START TS_END SEED
                           change K T CLIENT REQUEST
                         START/END in seconds after the run's start under gpushare, TS_START/TS_END
                         the same in the shorter time-sliced run (scaled to its length)

The scenario depends on SEED alone (random.Random(SEED)). Its times are drawn as fractions of the
run and scaled by --seconds, so a seed replays exactly with the same --seconds.

A workload SPEC (soak_job.py runs them) is one of
  kernels:D:sS     matmul kernels of about D each (20us .. 50ms), synchronizing after every S
                   kernels (s0: only every ~1 s of queued work)
  graph:wW:sS      an MLP training step of width W captured as one CUDA graph, replayed,
                   synchronizing every S replays
  train:Hms        a training loop bound by its host: a GPU step, loss.item(), then H ms of sleep
  mlp              a launch-bound MNIST-sized MLP training loop
  bursty:D         bursts of 50-200 ms of D kernels, then pauses of 100-1000 ms
  infer            inference: a small MLP forward every 5 ms, each request's latency recorded
"""
import argparse
import json
import os
import random

USERS = [f"gsbench{i}" for i in range(1, 9)]
KERNEL_TIMES = ["20us", "50us", "200us", "1ms", "1.6ms", "5ms", "20ms", "50ms"]
# (kind, weight) of the batch clients' workloads
KINDS = [("kernels", 35), ("graph", 10), ("train", 15), ("mlp", 10), ("bursty", 20), ("infer", 10)]
MEMORY_GIB_PER_PROCESS = 6  # each process allocates well under 2 GiB


def workload(rng):
    """A batch process's workload SPEC, drawn from the library."""
    kind = rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    if kind == "kernels":
        return f"kernels:{rng.choice(KERNEL_TIMES)}:s{rng.choice([1, 4, 0])}"
    if kind == "graph":
        return f"graph:w{rng.choice([1024, 4096])}:s{rng.choice([1, 10])}"
    if kind == "train":
        return f"train:{rng.choice([2, 5, 10, 20])}ms"
    if kind == "bursty":
        return f"bursty:{rng.choice(['200us', '1.6ms'])}"
    return kind


def lifetime(rng, seconds):
    """(start, end) of a process: most run throughout; some come later, some leave earlier."""
    start, end = 0.0, 1.0
    if rng.random() < 0.25:
        start = rng.uniform(0.1, 0.5)
    if rng.random() < 0.25:
        end = rng.uniform(max(start + 0.3, 0.5), 0.9)
    return round(start * seconds, 1), round(end * seconds, 1)


def generate(seed, seconds, ts_seconds):
    rng = random.Random(seed)
    n = rng.randint(2, 8)
    n_interactive = min(rng.choice([0, 0, 1, 1, 2]), n // 2)
    users = rng.sample(USERS, rng.randint(2, n))
    total = rng.uniform(0.5, 1.0)
    clients = []
    for i in range(n):
        interactive = i < n_interactive
        clients.append({"name": f"c{i + 1}", "user": users[i % len(users)], "interactive": interactive,
                        "request": rng.choice([0.02, 0.05, 0.1]) if interactive else None})
    # batch requests: the rest of `total` by random weights (now and then a client of request 0)
    left = total - sum(c["request"] for c in clients if c["interactive"])
    weights = {c["name"]: (0.0 if rng.random() < 0.1 else rng.uniform(0.1, 1.0))
               for c in clients if not c["interactive"]}
    wsum = sum(weights.values()) or 1.0
    for c in clients:
        if not c["interactive"]:
            c["request"] = max(0.0, int(left * weights[c["name"]] / wsum * 100) / 100)
    for c in clients:
        if rng.random() < 0.5:
            c["limit"] = 1.0
        else:
            c["limit"] = max(c["request"], round(rng.uniform(max(c["request"] + 0.05, 0.2), 0.9), 2))
        procs = []
        for k in range(rng.choice([1, 1, 2])):
            spec = "infer" if c["interactive"] else workload(rng)
            start, end = lifetime(rng, seconds)
            scale = ts_seconds / seconds
            procs.append({"name": f"{c['name']}.{k + 1}", "spec": spec, "start": start, "end": end,
                          "ts_start": round(start * scale, 1), "ts_end": round(end * scale, 1),
                          "seed": rng.randrange(2 ** 31)})
        c["procs"] = procs
        c["memory_gib"] = MEMORY_GIB_PER_PROCESS * len(procs)
    # one or two share changes (gpushare set NAME --request X), the requests summing to <= 1
    changes = []
    request = {c["name"]: c["request"] for c in clients}
    batch = [c for c in clients if not c["interactive"]]
    for t in sorted(rng.uniform(0.25, 0.85) for _ in range(rng.choice([1, 1, 2]))):
        c = rng.choice(batch)
        room = 1.0 - sum(r for name, r in request.items() if name != c["name"])
        new = int(rng.uniform(0.02, max(0.02, min(room, c["limit"]))) * 100) / 100
        changes.append({"t": round(t * seconds, 1), "client": c["name"], "from": request[c["name"]],
                        "request": new})
        request[c["name"]] = new
    return {"seed": seed, "seconds": seconds, "timeslice_seconds": ts_seconds, "clients": clients,
            "changes": changes}


def cell(name, seconds, ts_seconds):
    """The hand-written mix cells/NAME.json, its times scaled as a seed's are."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cells", f"{name}.json")) as f:
        spec = json.load(f)
    clients, request = [], {}
    for c in spec["clients"]:
        procs = []
        for k, p in enumerate(c["procs"], 1):
            start, end = p.get("start", 0.0), p.get("end", 1.0)
            procs.append({"name": f"{c['name']}.{k}", "spec": p["spec"],
                          "start": round(start * seconds, 1), "end": round(end * seconds, 1),
                          "ts_start": round(start * ts_seconds, 1), "ts_end": round(end * ts_seconds, 1),
                          "seed": 1000 * len(clients) + k})
        clients.append({"name": c["name"], "user": c["user"], "interactive": c.get("interactive", False),
                        "request": c["request"], "limit": c.get("limit", 1.0), "procs": procs,
                        "memory_gib": MEMORY_GIB_PER_PROCESS * len(procs)})
        request[c["name"]] = c["request"]
    changes = []
    for ch in spec.get("changes", []):
        changes.append({"t": round(ch["t"] * seconds, 1), "client": ch["client"],
                        "from": request[ch["client"]], "request": ch["request"]})
        request[ch["client"]] = ch["request"]
    return {"seed": name, "seconds": seconds, "timeslice_seconds": ts_seconds, "clients": clients,
            "changes": changes}


def clients_toml(scenario, upto=0):
    """The [clients.*] tables, with the first `upto` share changes applied."""
    request = {c["name"]: c["request"] for c in scenario["clients"]}
    for ch in scenario["changes"][:upto]:
        request[ch["client"]] = ch["request"]
    out = []
    for c in scenario["clients"]:
        out += [f"[clients.{c['name']}]", f"request = {request[c['name']]:.2f}", f"limit = {c['limit']:.2f}",
                f'memory = "{c["memory_gib"]}GiB"', f'users = ["{c["user"]}"]']
        if c["interactive"]:
            out.append("interactive = true")
        out.append("")
    return "\n".join(out)


def describe(s):
    n_procs = sum(len(c["procs"]) for c in s["clients"])
    lines = [f"seed {s['seed']}: {len(s['clients'])} clients, {n_procs} processes, {s['seconds']:g} s under "
             f"gpushare (time-sliced run {s['timeslice_seconds']:g} s); requests sum to "
             f"{sum(c['request'] for c in s['clients']):.2f}",
             f"  {'client':<7}{'user':<10}{'request':>8}{'limit':>7}  {'class':<12}{'memory':<8}processes"]
    for c in s["clients"]:
        procs = "; ".join(f"{p['name']} {p['spec']} {p['start']:g}-{p['end']:g} s" for p in c["procs"])
        lines.append(f"  {c['name']:<7}{c['user']:<10}{c['request']:>8.2f}{c['limit']:>7.2f}  "
                     f"{'interactive' if c['interactive'] else 'batch':<12}{str(c['memory_gib']) + 'GiB':<8}{procs}")
    for ch in s["changes"]:
        lines.append(f"  at {ch['t']:g} s: gpushare set {ch['client']} --request {ch['request']:.2f} "
                     f"(was {ch['from']:.2f})")
    return "\n".join(lines)


def plan(s):
    rows = []
    for c in s["clients"]:
        for p in c["procs"]:
            rows.append(["proc", p["name"], c["name"], c["user"], p["spec"], p["start"], p["end"],
                         p["ts_start"], p["ts_end"], p["seed"]])
    for k, ch in enumerate(s["changes"], 1):
        rows.append(["change", k, ch["t"], ch["client"], f"{ch['request']:.2f}"])
    return "".join("\t".join(str(v) for v in r) + "\n" for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("seed", help="a number, or the name of a cell (cells/NAME.json)")
    p.add_argument("--seconds", type=float, default=180)
    p.add_argument("--timeslice-seconds", type=float, default=40)
    p.add_argument("--dir", help="write scenario.json, scenario.txt, clients*.toml and plan.tsv here")
    a = p.parse_args()
    if a.seed.isdigit():
        s = generate(int(a.seed), a.seconds, a.timeslice_seconds)
    else:
        s = cell(a.seed, a.seconds, a.timeslice_seconds)
    text = describe(s)
    print(text)
    if a.dir:
        os.makedirs(a.dir, exist_ok=True)
        files = {"scenario.json": json.dumps(s, indent=1) + "\n", "scenario.txt": text + "\n",
                 "clients.toml": clients_toml(s), "plan.tsv": plan(s)}
        for k in range(1, len(s["changes"]) + 1):
            files[f"clients.change{k}.toml"] = clients_toml(s, k)
        for name, content in files.items():
            with open(os.path.join(a.dir, name), "w") as f:
                f.write(content)


if __name__ == "__main__":
    main()
