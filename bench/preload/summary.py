"""Summary of bench/preload/startup.sh: per command, the median wall time per start over the
rounds (each round's median, then their median), and what the hook adds."""
import json
import pathlib
import statistics
import sys

out = pathlib.Path(sys.argv[1])
medians = {}
for f in sorted(out.glob("hyperfine-*.json")):
    for r in json.loads(f.read_text())["results"]:
        medians.setdefault(r["command"], []).append(r["median"])
print("median wall time per start (ms), per round, then over rounds:")
mid = {}
for name, ms in medians.items():
    mid[name] = statistics.median(ms)
    print(f"  {name:12} " + " ".join(f"{m * 1e3:7.3f}" for m in ms) + f"  -> {mid[name] * 1e3:.3f}")
for base in ("true", "python"):
    if base in mid and base + "+hook" in mid:
        added = [h - b for h, b in zip(medians[base + "+hook"], medians[base])]
        print(
            f"hook adds to {base}: {statistics.median(added) * 1e6:.1f} us "
            f"(rounds: {', '.join(f'{a * 1e6:.1f}' for a in added)})"
        )
paired = out / "paired.txt"
if paired.exists():
    print("paired starts (medians):")
    for line in paired.read_text().splitlines():
        print("  " + line)
ins = out / "instructions.txt"
if ins.exists():
    rows = [l.split("\t") for l in ins.read_text().splitlines() if l]
    counts = {(c, h): int(n) for c, h, n in rows if n.strip()}
    for cmd in dict.fromkeys(c for c, _ in counts):
        if (cmd, "") in counts and (cmd, "hook") in counts:
            a, b = counts[(cmd, "")], counts[(cmd, "hook")]
            print(f"instructions of {cmd}: {a} -> {b} (+{b - a})")
