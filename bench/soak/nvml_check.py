"""Does NVML's per-process utilization tell what each process got? Runs pairs and triples of the
soak's workloads time-sliced (no gpushare) beside nvml_sampler.py and writes the raw records:

  nvml_check.py OUTPUT_DIR [--seconds 12] [--lead 12]

OUTPUT_DIR/solo.jsonl: soak_job.py's solo measurements; OUTPUT_DIR/mix-N/: each process's
progress lines (NAME.jsonl) and the samples (nvml.jsonl). `nvml_check.py --analyze OUTPUT_DIR`
prints, per process and mix, got (units over the work span times its solo GPU seconds per unit,
as the soak's analysis counts it) beside NVML's mean SM percent over the same span.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIXES = [
    ["kernels:1.6ms:s4", "infer"],
    ["kernels:1.6ms:s4", "train:2ms"],
    ["kernels:1.6ms:s4", "kernels:200us:s1"],
    ["train:2ms", "train:10ms", "infer"],
    ["kernels:50us:s4", "bursty:200us"],
    ["mlp", "kernels:1.6ms:s4"],
    ["kernels:1.6ms:s4"],
    ["infer"],
    ["train:2ms"],
]


def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except FileNotFoundError:
        return []


def run(out, seconds, lead):
    calib = os.path.join(out, "solo.jsonl")
    specs = sorted({s for m in MIXES for s in m})
    with open(calib, "a") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "soak_job.py"), "solo", *specs,
                        "--calib", calib], stdout=f, check=False)
    for i, mix in enumerate(MIXES):
        d = os.path.join(out, f"mix-{i}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "mix.json"), "w") as f:
            json.dump(mix, f)
        t0 = time.time() + lead
        t1 = t0 + seconds
        sampler = subprocess.Popen([sys.executable, os.path.join(HERE, "nvml_sampler.py"),
                                    "--every-s", "0.25"],
                                   stdout=open(os.path.join(d, "nvml.jsonl"), "w"))
        procs = []
        for j, spec in enumerate(mix):
            name = f"p{j}"
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "soak_job.py"), "run", spec, "--name", name,
                 "--client", name, "--mode", "timeslice", "--seed", str(j + 1), "--start", str(t0),
                 "--until", str(t1), "--calib", calib],
                stdout=open(os.path.join(d, f"{name}.jsonl"), "w")))
        for p in procs:
            p.wait(timeout=seconds + lead + 60)
        time.sleep(1)
        sampler.terminate()
        sampler.wait()
        print(f"mix {i} {mix} done", flush=True)


def analyze(out):
    solo = {r["spec"]: r for r in lines(os.path.join(out, "solo.jsonl")) if r.get("kind") == "solo"}
    for i, mix in enumerate(MIXES):
        d = os.path.join(out, f"mix-{i}")
        samples = [r for r in lines(os.path.join(d, "nvml.jsonl")) if r.get("kind") == "sample"]
        print(f"mix {i}: {' + '.join(mix)}")
        for j, spec in enumerate(mix):
            recs = lines(os.path.join(d, f"p{j}.jsonl"))
            start = next((r for r in recs if r["kind"] == "start"), None)
            prog = [r for r in recs if r["kind"] in ("progress", "end")]
            if not start or len(prog) < 4 or spec not in solo:
                print(f"  p{j} {spec}: no data")
                continue
            # the middle of the work: a second in, a second before the end
            a = prog[0]["t"] + 1.0
            b = prog[-1]["t"] - 1.0
            inside = [r for r in prog if a <= r["t"] <= b]
            units = inside[-1]["units"] - inside[0]["units"]
            span = inside[-1]["t"] - inside[0]["t"]
            got = units * solo[spec]["gpu_s_per_unit"] / span
            mine = [s for s in samples if s["pid"] == start["pid"]
                    and inside[0]["t"] * 1e6 <= s["ts_us"] <= inside[-1]["t"] * 1e6]
            stamps = sorted({s["ts_us"] for s in samples
                             if inside[0]["t"] * 1e6 <= s["ts_us"] <= inside[-1]["t"] * 1e6})
            sm = sum(s["sm"] for s in mine) / 100.0
            print(f"  p{j} {spec:18} got {got:.3f}  nvml mean over its samples "
                  f"{sm / max(len(mine), 1):.3f} ({len(mine)} samples), over all stamps "
                  f"{sm / max(len(stamps), 1):.3f} ({len(stamps)} stamps), solo busy "
                  f"{solo[spec]['busy']:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--seconds", type=float, default=12)
    p.add_argument("--lead", type=float, default=12)
    p.add_argument("--analyze", action="store_true")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not a.analyze:
        run(a.out, a.seconds, a.lead)
    analyze(a.out)


if __name__ == "__main__":
    main()
