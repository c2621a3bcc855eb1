"""The GPU's SM clock (gpu_clocks.py samples) inside each client's leases (a gpushared trace), per
shared phase of a sweep, and each job's rate by the time since its lease's grant:

  python3 clocks_by_lease.py DIR NAME     (DIR/clocks.csv.xz, DIR/NAME.gpushared.log.xz, DIR/NAME.jsonl)

Phases are matched to the daemon's runs in order (one gpushared per shared phase)."""
import bisect, csv, datetime, io, json, lzma, re, sys

d, name = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(io.TextIOWrapper(lzma.open(f"{d}/clocks.csv.xz"))))
T = [float(r["t"]) for r in rows]
SM = [int(r["sm_mhz"]) for r in rows]
lines = lzma.open(f"{d}/{name}.gpushared.log.xz", "rt", errors="replace").read().splitlines()
jobs = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.startswith("{") and "samples" in l]
solo = {r.get("cell"): r for r in jobs if r["phase"].endswith(".solo")}
shared = list(dict.fromkeys(r["phase"] for r in jobs if not r["phase"].endswith(".solo") and r.get("mode") == "gpushare"))


def ts(l):
    return datetime.datetime.strptime(l[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()


starts = [i for i, l in enumerate(lines) if "listening for CUDA" in l] + [len(lines)]
for k, ph in enumerate(shared):
    client, held, iv = {}, {}, {}
    for l in lines[starts[k]:starts[k + 1]]:
        if not l[:4].isdigit():
            continue
        m = re.search(r"process attached .* client=(\S+) session=(\d+)", l)
        if m:
            client[int(m.group(2))] = m.group(1)
        m = re.search(r" grant device=\S+ session=(\d+)", l)
        if m:
            held.setdefault(int(m.group(1)), ts(l))
            continue
        m = re.search(r"request session=(\d+) request=(Renew|Release)", l)
        if m and int(m.group(1)) in held:
            s = int(m.group(1))
            iv.setdefault(client[s], []).append((held.pop(s), ts(l)))
    mine = {r["name"]: r for r in jobs if r["phase"] == ph}
    t0 = max(r["samples"][0][0] for r in mine.values()) + 1
    t1 = min(r["samples"][-1][0] for r in mine.values()) - 0.5
    print(ph)
    for c, ivs in sorted(iv.items()):
        ivs = [(a, b) for a, b in ivs if t0 <= a and b <= t1]
        clk = [SM[q] for a, b in ivs for q in range(bisect.bisect_left(T, a), bisect.bisect_right(T, b))]
        by = {}
        for a, b in ivs:
            for q in range(bisect.bisect_left(T, a), bisect.bisect_right(T, b)):
                by.setdefault(min(int((T[q] - a) * 100) * 10, 100), []).append(SM[q])
        print("  client %s: %.2f s held of %.2f, SM clock in its leases %.0f MHz; by ms since grant %s" % (
            c, sum(b - a for a, b in ivs), t1 - t0, sum(clk) / max(1, len(clk)),
            {p: round(sum(v) / len(v)) for p, v in sorted(by.items())}))
        r = mine.get(c)
        if not r or r.get("cell") not in solo:
            continue
        ss = solo[r["cell"]]["samples"]
        srate = (ss[-1][1] - ss[5][1]) / (ss[-1][0] - ss[5][0])
        bins = {}
        starts_c = [a for a, _ in ivs]
        for (a0, k0), (a1, k1) in zip(r["samples"], r["samples"][1:]):
            i = bisect.bisect_right(starts_c, a0) - 1
            if i < 0 or a1 <= a0 or not (ivs[i][0] <= a0 and a1 <= ivs[i][1]):
                continue
            p = min(int((a0 - ivs[i][0]) * 100) * 10, 100)
            b = bins.setdefault(p, [0, 0.0])
            b[0] += k1 - k0
            b[1] += a1 - a0
        print("    its rate over its solo rate by ms since grant:",
              {p: round(n / t / srate, 3) for p, (n, t) in sorted(bins.items()) if t > 0.05})
