"""NVML's per-process utilization samples of one GPU, as JSON lines, until killed or --seconds:

  nvml_sampler.py [--index I] [--every-s 0.5] [--seconds S]
      {"kind": "sample", "t": host time.time() of the poll, "pid": P, "ts_us": the driver's
       timestamp of the sample, "sm": percent of the sample period the process's kernels ran}

nvmlDeviceGetProcessUtilization returns the samples newer than a timestamp; each poll asks for
those newer than the newest one seen. Loaded with ctypes (no pynvml needed). Reads only: it never
changes the GPU's settings.
"""
import argparse
import ctypes
import json
import sys
import time


class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


NVML_SUCCESS, NVML_ERROR_NOT_FOUND, NVML_ERROR_INSUFFICIENT_SIZE = 0, 6, 7


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--every-s", type=float, default=0.5)
    p.add_argument("--seconds", type=float, default=0)
    a = p.parse_args()
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    rc = nvml.nvmlInit_v2()
    if rc != NVML_SUCCESS:
        sys.exit(f"nvmlInit: {rc}")
    dev = ctypes.c_void_p()
    rc = nvml.nvmlDeviceGetHandleByIndex_v2(a.index, ctypes.byref(dev))
    if rc != NVML_SUCCESS:
        sys.exit(f"nvmlDeviceGetHandleByIndex({a.index}): {rc}")
    last = ctypes.c_ulonglong(0)
    end = time.time() + a.seconds if a.seconds else None
    while end is None or time.time() < end:
        count = ctypes.c_uint(0)
        rc = nvml.nvmlDeviceGetProcessUtilization(dev, None, ctypes.byref(count), last)
        now = time.time()
        if rc == NVML_ERROR_INSUFFICIENT_SIZE and count.value:
            buf = (Sample * count.value)()
            rc = nvml.nvmlDeviceGetProcessUtilization(dev, buf, ctypes.byref(count), last)
            if rc == NVML_SUCCESS:
                newest = last.value
                for s in buf[:count.value]:
                    print(json.dumps({"kind": "sample", "t": round(now, 4), "pid": s.pid,
                                      "ts_us": s.timeStamp, "sm": s.smUtil}), flush=True)
                    newest = max(newest, s.timeStamp)
                last = ctypes.c_ulonglong(newest)
        elif rc not in (NVML_SUCCESS, NVML_ERROR_NOT_FOUND, NVML_ERROR_INSUFFICIENT_SIZE):
            print(json.dumps({"kind": "error", "t": round(now, 4), "rc": rc}), flush=True)
        time.sleep(a.every_s)


if __name__ == "__main__":
    main()
