"""Shares of matmul_job.py runs: each job's rate relative to the solo rate, over the time all jobs
of a phase ran at once, whole and in windows of --window seconds, and the largest distance of
a windowed share from the share the job is due, in points (1 point = 1% of the GPU). A job is
due its request scaled by the requests of the jobs running (the scheduler is work-conserving:
what idle clients leave goes to those with work), so a lone job is due all of the GPU.

  python3 analyze.py [--window SECONDS] share.jsonl
A results file kept compressed (share.jsonl.xz or .gz, as bench/results does with large ones) is
read as it is.
"""
import argparse
import gzip
import json
import lzma
import os


def open_text(path):
    """The text file `path`, or its compressed copy (PATH.xz, PATH.gz, or PATH itself so named)."""
    for p in (path, path + ".xz", path + ".gz"):
        if os.path.exists(p):
            if p.endswith(".xz"):
                return lzma.open(p, "rt")
            if p.endswith(".gz"):
                return gzip.open(p, "rt")
            return open(p)
    return open(path)  # the error names the path asked for


def done_at(samples, t):
    """Iterations done at time t, interpolated between the samples around it."""
    for (ta, na), (tb, nb) in zip(samples, samples[1:]):
        if ta <= t <= tb:
            return na + (nb - na) * (t - ta) / (tb - ta) if tb > ta else nb
    return None


def rate(samples, t0, t1):
    a, b = done_at(samples, t0), done_at(samples, t1)
    return (b - a) / (t1 - t0) if a is not None and b is not None and t1 > t0 else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--window", type=float, default=10.0)
    p.add_argument("path")
    a = p.parse_args()
    runs = [json.loads(l) for l in open_text(a.path) if l.startswith("{")]
    by = {}
    for r in runs:
        by.setdefault(r["phase"], []).append(r)
    solo = {}
    for r in by.get("solo", []):
        s = r["samples"]
        solo[r["name"]] = rate(s, s[0][0] + 1.0, s[-1][0] - 0.5)
    out = {"solo": solo, "window_s": a.window}
    for phase, rs in by.items():
        if phase == "solo":
            continue
        t0 = max(r["samples"][0][0] for r in rs) + 2.0
        t1 = min(r["samples"][-1][0] for r in rs) - 1.0
        n = max(1, int((t1 - t0) // a.window))
        width = min(a.window, t1 - t0)
        windows = [(t0 + k * width, t0 + (k + 1) * width) for k in range(n)]
        jobs, worst = {}, 0.0
        requested = sum(r.get("request") or 0.0 for r in rs)
        for r in sorted(rs, key=lambda r: r["name"]):
            base = solo.get(r["name"].split(".")[0]) or solo.get("ref")
            share = lambda w0, w1: rate(r["samples"], w0, w1) / base if base else None
            job = {"request": r.get("request"), "share": share(t0, t1),
                   "windows": [share(w0, w1) for w0, w1 in windows]}
            if job["request"] is not None and requested > 0 and base:
                job["due"] = job["request"] / requested
                job["max_error_points"] = max(abs(s - job["due"]) * 100 for s in job["windows"])
                worst = max(worst, job["max_error_points"])
            jobs[r["name"]] = job
        out[phase] = {"span_s": t1 - t0, "windows": len(windows), "jobs": jobs,
                      "total_share": sum(j["share"] for j in jobs.values() if j["share"] is not None)}
        if any(j["request"] is not None for j in jobs.values()):
            out[phase]["max_error_points"] = worst
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
