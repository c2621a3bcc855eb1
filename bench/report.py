"""Tables (summary.md) and a plot (summary.png, with matplotlib) from bench/run.sh results
directories:   python3 bench/report.py RESULTS_DIR [MORE_DIR...]
Reads the *_summary.json files the scenarios wrote, each from the first directory that has it
(parts run in separate calls, e.g. on a machine of two GPUs, put together); scenarios that did
not run are left out. Writes into the first directory.
"""
import glob
import json
import os
import sys

dirs = sys.argv[1:]
if not dirs:
    sys.exit("usage: python3 bench/report.py RESULTS_DIR [MORE_DIR...]")
d = dirs[0]


def find(name):
    """The path of `name` in the first directory that has it, or None."""
    return next((p for p in (os.path.join(x, name) for x in dirs) if os.path.exists(p)), None)


def load(name):
    p = find(name)
    return json.load(open(p)) if p else None


def f(x, n=3):
    return "-" if x is None else f"{x:.{n}f}"


md = ["# Benchmark summary", ""]
for x in dirs:
    if os.path.exists(os.path.join(x, "device.txt")):
        where = f" (`{os.path.basename(os.path.normpath(x))}`)" if len(dirs) > 1 else ""
        md += [f"Device{where}: " + open(os.path.join(x, "device.txt")).read().strip().replace("\n", "; "), ""]


def table(title, columns, rows):
    """A markdown section: the title, a table of `columns` with `rows` (lists of cells)."""
    md.extend([f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)])
    md.extend("| " + " | ".join(str(c) for c in r) + " |" for r in rows)
    md.append("")


ov = load("hook_overhead_summary.json")
if ov:
    names = {"launch_loop": "empty-kernel launches (ns each), daemon attached",
             "launch_loop_no_daemon": "empty-kernel launches (ns each), no daemon",
             "torch_add": "PyTorch tensor add (us each)", "torch_mlp": "PyTorch small-MLP step (us each)",
             "wrapper_cost": "test-double driver, no GPU (ns each)"}
    table("Hook overhead (time under the hook / time without, per round; median, 95% interval)",
          ["loop", "rounds", "without", "with", "ratio", "95% interval"],
          [[label, v["rounds"], f(v["plain_median"], 1), f(v.get("hook_median", v.get("nodaemon_median")), 1),
            f(v["median_ratio"], 4), f"{f(v['ci95'][0], 4)}-{f(v['ci95'][1], 4)}"]
           for k, label in names.items() if (v := ov.get(k))])

def latency_table(title, lat):
    table(title, ["mode", "requests", "p50 ms", "p99 ms", "p50 / solo", "p99 / solo", "trainer steps/s"],
          [[k, v.get("requests", "error: " + str(v.get("error"))[:80]), f(v.get("p50_ms"), 2), f(v.get("p99_ms"), 2),
            f(v.get("p50_vs_solo"), 2), f(v.get("p99_vs_solo"), 2), f(v.get("trainer_iters_per_s"), 0)]
           for k, v in lat.items()])


lat = load("latency_summary.json")
if lat:
    latency_table("Latency isolation (inference client, batch 1-8, beside 3 trainers)", lat)
lat_i = load("interactive/latency_summary.json")
if lat_i:
    latency_table("Latency isolation with an interactive client (gpushare without MPS)", lat_i)

osub = load("oversubscribe_summary.json")
if osub:
    table("Oversubscription (PyTorch training jobs, managed memory, hand-overs)",
          ["mode", "jobs", "aggregate steps/s", "vs one job alone", "mean GPU memory MiB", "max MiB",
           "weights as solo"],
          [[k, v["jobs"], f(v["aggregate_steps_per_s"], 2), f(v["vs_solo"], 3), f(v["gpu_used_mib_mean"], 0),
            f(v["gpu_used_mib_max"], 0), v["all_correct"]] for k, v in osub.items() if k != "solo"])

caps = load("caps_summary.json")
if caps:
    table("Memory caps", ["process", "cap", "reached", "OOM at the cap", "total seen"],
          [[k, v["cap"], v["reached"], v["at_cap"], v["total_seen"]]
           for k, v in caps.items() if isinstance(v, dict) and "cap" in v])

share = load("share_summary.json")
if share:
    table(f"Share accuracy and work conservation (share of the solo rate, {f(share.get('window_s'), 0)} s windows)",
          ["scenario", "job", "request", "due", "share", "per window", "worst window, points from due"],
          [[k, j, f(x["request"], 2), f(x.get("due")), f(x["share"]), " ".join(f(w) for w in x["windows"]),
            f(x.get("max_error_points"), 1)]
           for k, v in share.items() if isinstance(v, dict) and "jobs" in v for j, x in v["jobs"].items()])

thr = load("throughput_summary.json")
if thr:
    table("Aggregate throughput (total work per second)",
          ["workload", "mode", "jobs", "vs one job", "vs time-slicing", "vs MPS"],
          [[v.get("workload", "-"), v.get("mode", k), v["jobs"], f(v["vs_solo"]), f(v.get("vs_timeslice")),
            f(v.get("vs_mps"))] for k, v in thr.items() if isinstance(v, dict) and "jobs" in v])

sweeps = {}
for path in sorted(p for x in dirs for p in glob.glob(os.path.join(x, "sweep*_summary.json"))):
    name = os.path.basename(path)[: -len("_summary.json")]
    if name in sweeps:
        continue
    sw = json.load(open(path))
    sweeps[name] = sw
    cal = sw.get("calibration", {})
    rows = []
    for k, v in sw.items():
        if not isinstance(v, dict) or "cell" not in v:
            continue
        kern, solo = v.get("kernel"), sw.get("solo", {}).get(v["cell"], {})
        size = f"{kern} ({f(cal[kern]['kernel_us'], 0)} us" if kern in cal else f"{kern or v['cell']} ("
        size += (f"; solo {f(solo.get('us_per_kernel'), 0)} us each)" if "us_per_kernel" in solo
                 else f"solo {f(solo.get('ms_per_step'), 3)} ms a step)" if "ms_per_step" in solo else ")")
        if "jobs" not in v:
            rows.append([k, size, v.get("sync", "-"), "-", "-", "-", "-", "-", "-", "error: " + v.get("error", "?")])
            continue
        for j, x in v["jobs"].items():
            rows.append([k, size, v.get("sync", "-"), j, x.get("user") or "-", f(x.get("due"), 2), f(x["share"]),
                         " ".join(f(w) for w in x["windows"]), f(x.get("max_error_points"), 1),
                         f"{f(v['sum'])} ({' '.join(f(w) for w in v['sum_windows'])})"])
    if rows:
        table(f"Share sweep `{name}`: share of the solo rate, {f(sw.get('window_s'), 0)} s windows "
              "(gpushare's default mode, no MPS; sync 0 = ~1 s of work queued)",
              ["phase", "kernel (measured)", "sync", "job", "user", "due", "share", "per window",
               "worst window, points from due", "sum (per window)"], rows)
    errs = sw.get("errors", [])
    if errs:
        table(f"Share sweep `{name}`: phases that failed", ["phase", "error"],
              [[e.get("phase", "-"), str(e.get("error"))[:160]] for e in errs])

lb = load("launch_bound_summary.json")
if lb:
    rows = []
    for mode, m in lb.get("modes", {}).items():
        for rnd, x in m["rounds"].items():
            rows.append([mode, rnd, x["jobs_done"], f(x["aggregate_steps_per_s"], 0),
                         f(m.get("vs_timeslice_per_round", {}).get(rnd)), f(x["mean_job_wall_s"], 2),
                         " ".join(f(w, 2) for w in x["job_wall_s"])])
        rows.append([mode, "mean", "-", f(m["aggregate_steps_per_s"], 0), f(m.get("vs_timeslice")),
                     f(m["mean_job_wall_s"], 2), "-"])
    table(f"Launch-bound MLP jobs ({lb.get('jobs')} at once, {lb.get('steps')} steps each; gpushare's default "
          "configuration)",
          ["mode", "round", "jobs done", "aggregate steps/s", "vs time-slicing", "mean job s", "job wall s"], rows)

mix = load("mixed_summary.json")
if mix:
    phases = {k: v for k, v in mix.get("phases", {}).items() if not k.endswith(".solo")}
    jobs = sorted({j for v in phases.values() for j in v["jobs"]})
    rows = []
    for k, v in phases.items():
        def cell(j):
            x = v["jobs"].get(j)
            if not x:
                return "-"
            c = f(x.get("vs_timeslice")) if "vs_timeslice" in x else f(x.get("share"))
            return c + (f" ({f(x['p50_ms'], 2)}/{f(x['p99_ms'], 2)} ms)" if "p99_ms" in x else "")
        rows.append([k, f(v.get("sum_of_shares"))] + [cell(j) for j in jobs])
    table("A lab's mix: each job's rate under gpushare over its rate under time-slicing (time-slicing "
          "rows: rate over solo; inference p50/p99)", ["phase", "sum of shares"] + jobs, rows)

compat = load("hook_compat_summary.json")
if compat:
    table("Framework compatibility (results under the hook identical to without)", ["program", "identical"],
          [[k, v["identical"]] for k, v in compat.items()])

mg = load("multi_gpu_summary.json")
if mg and "ratio" in mg:
    table("Every GPU its own token: one saturating job per GPU, its rate under gpushare over its rate "
          "without (target 0.98)", ["GPU", "rate without", "rate under gpushare", "ratio"],
          [[g, f(mg["rates"].get(f"plain/{g}"), 1), f(mg["rates"].get(f"gpushare/{g}"), 1), f(r)]
           for g, r in mg["ratio"].items()])
    cap = mg.get("cap") or {}
    if cap.get("steps"):
        table(f"A capped process on two GPUs (`{cap.get('name', '-')}`)", ["GPU", "GiB asked", "result"],
              [[g, gib, res] for g, gib, res in cap["steps"]])

side = find("gpu_side.jsonl")
checks = [json.loads(l) for l in open(side) if l.startswith("{") and '"check"' in l] if side else []
if checks:
    table("The GPU side", ["check", "ok"], [[c["check"], c["ok"]] for c in checks])

open(os.path.join(d, "summary.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: no summary.png", file=sys.stderr)
    sys.exit(0)

# the share panel takes the share scenario's phases and the sweeps' (phase names prefixed)
shares = {k: v for k, v in (share or {}).items()}
for name, sw in sweeps.items():
    shares.update({f"{name} {k}": v for k, v in sw.items() if isinstance(v, dict) and "jobs" in v})
lat = lat or lat_i
lb_modes = (lb or {}).get("modes", {})
mg_ratio = (mg or {}).get("ratio", {})
panels = [p for p in (ov, lat, osub, shares, thr, lb_modes, mg_ratio) if p]
if not panels:
    sys.exit(0)
fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5))
axes = list(axes) if len(panels) > 1 else [axes]
ax = iter(axes)
if ov:
    a = next(ax)
    keys = [k for k in ("launch_loop", "launch_loop_no_daemon", "torch_add", "torch_mlp") if ov.get(k)]
    med = [ov[k]["median_ratio"] for k in keys]
    err = [[m - ov[k]["ci95"][0] for k, m in zip(keys, med)], [ov[k]["ci95"][1] - m for k, m in zip(keys, med)]]
    a.bar(range(len(keys)), med, yerr=err, capsize=4, color="#4c72b0")
    a.axhline(1.0, color="k", lw=0.8)
    a.axhline(1.01, color="r", lw=0.8, ls="--", label="target 1.01")
    a.set_xticks(range(len(keys)), [k.replace("_", "\n") for k in keys], fontsize=8)
    a.set_ylim(min(0.9, min(med) - 0.05), max(1.1, max(med) + 0.05))
    a.set_title("Hook overhead (with / without)")
    a.legend(fontsize=8)
if lat:
    a = next(ax)
    keys = [k for k in lat if "p50_ms" in lat[k]]
    a.bar([i - 0.2 for i in range(len(keys))], [lat[k]["p50_ms"] for k in keys], 0.4, label="p50")
    a.bar([i + 0.2 for i in range(len(keys))], [lat[k]["p99_ms"] for k in keys], 0.4, label="p99")
    if "solo" in lat:
        a.axhline(1.5 * lat["solo"]["p99_ms"], color="r", ls="--", lw=0.8, label="1.5 x solo p99")
    a.set_yscale("log")
    a.set_ylabel("ms")
    a.set_xticks(range(len(keys)), [k.replace("_", "\n") for k in keys], fontsize=7)
    a.set_title("Inference latency beside 3 trainers")
    a.legend(fontsize=8)
if osub:
    a = next(ax)
    keys = [k for k in osub if k != "solo"]
    a.bar(range(len(keys)), [osub[k]["aggregate_steps_per_s"] for k in keys], color="#55a868")
    a.set_ylabel("aggregate steps/s")
    a2 = a.twinx()
    a2.plot(range(len(keys)), [osub[k]["gpu_used_mib_mean"] / 1024 for k in keys], "ko-", label="mean GPU GiB")
    a2.set_ylabel("mean GPU memory (GiB)")
    a.set_xticks(range(len(keys)), [k.replace("_", "\n") for k in keys], fontsize=8)
    a.set_title("Oversubscription")
if shares:
    a = next(ax)
    for k, v in shares.items():
        if isinstance(v, dict) and "jobs" in v and any("due" in x for x in v["jobs"].values()):
            pts = [(x["due"], w) for x in v["jobs"].values() if "due" in x for w in x["windows"]]
            a.plot([p[0] for p in pts], [p[1] for p in pts], "o", ms=4, alpha=0.7, label=k)
    a.plot([0.03, 1.2], [0.03, 1.2], "k-", lw=0.8)
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlim(0.03, 1.2)
    a.set_ylim(0.03, 1.2)
    a.set_xlabel("share due (request / requests running)")
    a.set_ylabel("share achieved, per window")
    a.set_title("Share accuracy")
    a.legend(fontsize=7 if len(shares) <= 12 else 4, ncol=1 if len(shares) <= 12 else 2)
if thr:
    a = next(ax)
    keys = [k for k, v in thr.items() if isinstance(v, dict) and "jobs" in v]
    a.bar(range(len(keys)), [thr[k]["vs_solo"] for k in keys], color="#c44e52")
    for i, k in enumerate(keys):
        # against each reference mode, but on that mode's own bar
        vs = [f"{thr[k][r]:.3f}x {n}" for r, n, ref in (("vs_mps", "MPS", "mps"), ("vs_timeslice", "TS", "timeslice"))
              if thr[k].get(r) is not None and thr[k].get("mode") != ref]
        if vs:
            a.text(i, thr[k]["vs_solo"], "\n".join(vs), ha="center", va="bottom", fontsize=6)
    a.set_xticks(range(len(keys)), [k.replace("_", "\n") for k in keys], fontsize=5)
    a.set_ylabel("work / one job alone")
    a.set_title("Aggregate throughput")
if lb_modes:
    a = next(ax)
    keys = list(lb_modes)
    a.bar(range(len(keys)), [lb_modes[k]["aggregate_steps_per_s"] for k in keys], color="#8172b2")
    for i, k in enumerate(keys):
        if lb_modes[k].get("vs_timeslice") is not None:
            a.text(i, lb_modes[k]["aggregate_steps_per_s"], f"{lb_modes[k]['vs_timeslice']:.3f}x",
                   ha="center", va="bottom", fontsize=8)
    a.set_xticks(range(len(keys)), [k.replace("_", "\n") for k in keys], fontsize=8)
    a.set_ylabel("aggregate steps/s")
    a.set_title(f"{lb.get('jobs')} launch-bound MLP jobs")
if mg_ratio:
    a = next(ax)
    keys = list(mg_ratio)
    a.bar(range(len(keys)), [mg_ratio[k] for k in keys], color="#64b5cd")
    a.axhline(0.98, color="r", lw=0.8, ls="--", label="target 0.98")
    a.set_xticks(range(len(keys)), keys)
    a.set_ylim(0.9, 1.02)
    a.set_ylabel("rate under gpushare / without")
    a.set_title("One job per GPU")
    a.legend(fontsize=8)
fig.tight_layout()
fig.savefig(os.path.join(d, "summary.png"), dpi=110)
