"""Rates of matmul_job.py runs over a common window, and shares relative to solo rates."""
import json, sys


def rate(samples, t0, t1):
    inside = [(t, n) for t, n in samples if t0 <= t <= t1]
    if len(inside) < 2:
        return 0.0
    (ta, na), (tb, nb) = inside[0], inside[-1]
    return (nb - na) / (tb - ta)


def main(path):
    runs = [json.loads(l) for l in open(path) if l.startswith("{")]
    by = {}
    for r in runs:
        by.setdefault(r["phase"], []).append(r)
    out = {}
    solo = {}
    for r in by.get("solo", []):
        s = r["samples"]
        solo[r["name"]] = rate(s, s[0][0] + 1.0, s[-1][0] - 0.5)
    for phase, rs in by.items():
        if phase == "solo":
            continue
        t0 = max(r["samples"][0][0] for r in rs) + 2.0
        t1 = min(r["samples"][-1][0] for r in rs) - 1.0
        res = {}
        for r in rs:
            rr = rate(r["samples"], t0, t1)
            base = solo.get(r["name"].split(".")[0]) or solo.get("ref")
            res[r["name"]] = {"rate": rr, "share": rr / base if base else None}
        out[phase] = {"window_s": t1 - t0, "jobs": res}
    out["solo"] = solo
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
