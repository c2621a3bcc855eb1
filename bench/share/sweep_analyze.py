"""Shares in the kernel-size x sync-interval sweep (sweep.sh): per phase CELL.MODE, each job's rate
(kernels or steps per second) over its cell's solo rate (CELL.solo: one job alone, no hook; the
mean where the solo phase ran more than once), over the time all jobs of the phase ran at once,
whole and per --window seconds, with the distance of each windowed share from the share the job is due (its request over the requests of the jobs
running), in points (1 point = 1% of the GPU), and the sum of the shares.

Windows: ceil(span / window) windows of --window seconds spread evenly from the start to the end
of the span (they overlap where the span is not a multiple of the window; one window, the whole
span, where the span is shorter). The span runs from 1 s after the last job's first sample to
0.5 s before the earliest deadline (jobs stop launching at their deadline and drain their queue
after it, alone).

  python3 sweep_analyze.py [--window SECONDS] sweep.jsonl
"""
import argparse
import json
import math

from analyze import open_text, rate


def windows(t0, t1, width):
    span = t1 - t0
    if span <= width:
        return [(t0, t1)]
    n = math.ceil(span / width - 1e-9)
    step = (span - width) / (n - 1) if n > 1 else 0.0
    return [(t0 + k * step, t0 + k * step + width) for k in range(n)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("path")
    a = p.parse_args()
    rows = []
    for line in open_text(a.path):
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    out = {"window_s": a.window, "calibration": {}, "solo": {}, "errors": [], "notes": []}
    by = {}
    for r in rows:
        if r.get("kind") == "calibration":
            out["calibration"][r["kernel"]] = {"shape": r["shape"], "kernel_us": r["kernel_us"],
                                               "target_us": r["target_us"]}
        elif "error" in r:
            out["errors"].append(r)
        elif "note" in r:
            out["notes"].append(r)
        elif "samples" in r and len(r["samples"]) > 1:
            by.setdefault(r["phase"], []).append(r)
    for phase, rs in by.items():
        if phase.endswith(".solo"):
            # a solo phase run more than once (before and after the shared ones): their mean
            rates = [rate(x["samples"], x["samples"][0][0] + 1.0, x["samples"][-1][0] - 0.5) for x in rs]
            r = rs[0]
            v = sum(rates) / len(rates)
            solo = {"rate": v, "unit": r.get("unit"), "user": r.get("user")}
            if len(rates) > 1:
                solo["rates"] = rates
            if r.get("unit") == "kernels":
                solo["us_per_kernel"] = 1e6 / v if v else None
                solo["kernel_us"] = r.get("kernel_us")
                solo["shape"] = r.get("shape")
                solo["sync_batch"] = r.get("sync_batch")
            else:
                solo["ms_per_step"] = 1e3 / v if v else None
            out["solo"][r.get("cell") or phase[: -len(".solo")]] = solo
    for phase, rs in by.items():
        if phase.endswith(".solo"):
            continue
        cell = rs[0].get("cell") or phase.rsplit(".", 1)[0]
        # each job against its own cell's solo rate (a mixed phase runs jobs of two cells)
        bases = {r["name"]: (out["solo"].get(r.get("cell") or cell) or {}).get("rate") for r in rs}
        base = None if any(b is None for b in bases.values()) else min(bases.values())
        t0 = max(r["samples"][0][0] for r in rs) + 1.0
        t1 = min(min(r["samples"][-1][0] for r in rs), min(r.get("until") or math.inf for r in rs)) - 0.5
        res = {"cell": cell, "mode": rs[0].get("mode"), "clients": len(rs), "span_s": round(t1 - t0, 2)}
        if ":" in cell:
            res["kernel"], res["sync"] = cell.split(":", 1)
        if not base or t1 - t0 <= 1.0:
            res["error"] = ("no solo rate for the cell" if base is None else
                            "the solo job ran too short to measure" if not base else "the jobs did not run at once")
            out[phase] = res
            continue
        ws = windows(t0, t1, a.window)
        requested = sum(r.get("request") or 0.0 for r in rs)
        all_requested = all(r.get("request") is not None for r in rs)
        jobs, worst = {}, None
        sums = [0.0] * len(ws)
        for r in sorted(rs, key=lambda r: r["name"]):
            s = r["samples"]
            b = bases[r["name"]]
            job = {"user": r.get("user"), "request": r.get("request"), "cell": r.get("cell"),
                   "share": rate(s, t0, t1) / b, "windows": [rate(s, w0, w1) / b for w0, w1 in ws]}
            for i, v in enumerate(job["windows"]):
                sums[i] += v
            if all_requested and requested > 0:
                job["due"] = r["request"] / requested
                job["max_error_points"] = max(abs(v - job["due"]) * 100 for v in job["windows"])
                worst = max(worst or 0.0, job["max_error_points"])
            jobs[r["name"]] = job
        res.update({"windows": len(ws), "window_starts_s": [round(w0 - t0, 2) for w0, _ in ws], "jobs": jobs,
                    "sum": sum(j["share"] for j in jobs.values()), "sum_windows": sums})
        if worst is not None:
            res["max_error_points"] = worst
        out[phase] = res
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
