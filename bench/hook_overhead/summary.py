"""Summary of a hook_overhead.jsonl (bench/hook_overhead/run.sh): for each loop, the median
of the per-round ratios (under the hook / without) and a bootstrap 95% interval of it.
  python3 bench/hook_overhead/summary.py hook_overhead.jsonl   (prints JSON)
"""
import json, random, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
random.seed(1)
def paired(bench, key, variant):
    by = {}
    for r in rows:
        if r.get("bench") == bench and "." in r["label"]:
            kind, n = r["label"].rsplit(".", 1)
            by.setdefault(n, {})[kind] = r[key]
    ratios = [v[variant] / v["plain"] for v in by.values() if "plain" in v and variant in v]
    if not ratios:
        return None
    boot = sorted(statistics.median(random.choices(ratios, k=len(ratios))) for _ in range(2000))
    return {"rounds": len(ratios), "median_ratio": round(statistics.median(ratios), 4),
            "ci95": [round(boot[50], 4), round(boot[1949], 4)],
            "plain_median": statistics.median(v["plain"] for v in by.values() if "plain" in v),
            f"{variant}_median": statistics.median(v[variant] for v in by.values() if variant in v),
            "ratios": [round(x, 4) for x in ratios]}
out = {
    "wrapper_cost": paired("wrapper_cost", "ns_per_launch", "hook"),
    "launch_loop": paired("launch_loop", "ns_per_launch", "hook"),
    "launch_loop_no_daemon": paired("launch_loop", "ns_per_launch", "nodaemon"),
    "torch_add": paired("torch_add", "us_per_iter", "hook"),
    "torch_mlp": paired("torch_mlp", "us_per_iter", "hook"),
}
w = out["wrapper_cost"]
if w:
    out["wrapper_cost"]["added_ns_per_launch"] = round(w["hook_median"] - w["plain_median"], 2)
caps = [r for r in rows if r.get("bench") == "torch_cap"]
out["cap"] = [{k: r[k] for k in ("label", "bytes_reached", "mem_get_info_full", "oom")} for r in caps]
print(json.dumps(out, indent=1))
