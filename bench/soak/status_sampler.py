"""The daemon's own view of its clients, sampled for the soak (bench/soak/run.sh):

  status_sampler.py --cli GPUSHARE --socket SOCK --until T [--every 1]

asks `gpushare --bus none --socket SOCK --json status` every --every seconds until the absolute
time.time() T and prints one JSON line per answer:
  {"t": when asked (mid-call), "leases": the GPU's lease mode, "config_error": ...,
   "clients": [{"name", "request", "limit", "interactive", "share_used", "charged_ns",
                "gpu_time_ns", "pids", "holding", "waiting", "demand"}]}
`charged_ns` is the GPU time the daemon charged the client so far (its USED over a window is the
difference over the window's length); `share_used` its own figure over the last ten seconds;
`demand` the scheduler's estimate (added up over the GPUs).
"""
import argparse
import json
import subprocess
import time

KEEP = ("name", "request", "limit", "interactive", "share_used", "charged_ns", "gpu_time_ns", "pids",
        "holding", "waiting")


def sample(cli, socket):
    t0 = time.time()
    r = subprocess.run([cli, "--bus", "none", "--socket", socket, "--json", "status"],
                       capture_output=True, text=True, timeout=10)
    t = (t0 + time.time()) / 2
    if r.returncode != 0:
        return {"t": round(t, 4), "error": (r.stderr or r.stdout).strip()[-300:]}
    doc = json.loads(r.stdout)
    clients = []
    for c in doc.get("clients", []):
        row = {k: c.get(k) for k in KEEP}
        row["demand"] = sum(d.get("demand", 0.0) for d in c.get("devices", []))
        clients.append(row)
    devices = doc.get("devices", [])
    return {"t": round(t, 4), "leases": devices[0].get("leases") if devices else None,
            "config_error": doc.get("config_error", ""), "clients": clients}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", required=True, help="the gpushare program")
    p.add_argument("--socket", required=True)
    p.add_argument("--until", type=float, required=True)
    p.add_argument("--every", type=float, default=1.0)
    a = p.parse_args()
    nxt = time.time()
    while nxt < a.until:
        try:
            rec = sample(a.cli, a.socket)
        except (subprocess.SubprocessError, OSError, ValueError) as e:
            rec = {"t": round(time.time(), 4), "error": str(e)}
        print(json.dumps(rec), flush=True)
        nxt += a.every
        time.sleep(max(0.0, nxt - time.time()))


if __name__ == "__main__":
    main()
