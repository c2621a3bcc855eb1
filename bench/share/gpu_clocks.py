"""Samples GPU 0's SM clock, power and clock event reasons through NVML until killed or for
--seconds, one CSV line per sample (time.time(), SM MHz, mW, reasons bit mask, degrees C):

  python3 gpu_clocks.py [--every-ms 2] [--seconds S] > clocks.csv

For telling how much a job's rate beside another job owes to the GPU's clocks (a job that draws
much power lowers them for the next one). Reads only; the GPU's settings are untouched."""
import argparse, ctypes, signal, sys, time

p = argparse.ArgumentParser()
p.add_argument("--every-ms", type=float, default=2.0)
p.add_argument("--seconds", type=float, default=3600.0)
p.add_argument("--index", type=int, default=0)
a = p.parse_args()
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0, "nvmlInit failed"
h = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(a.index, ctypes.byref(h)) == 0
reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
mhz, mw, temp, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
stop = False


def done(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, done)
signal.signal(signal.SIGINT, done)
out = sys.stdout
out.write("t,sm_mhz,power_mw,reasons,temp_c\n")
end = time.time() + a.seconds
while not stop and time.time() < end:
    nvml.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(mhz))
    nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw))
    reasons_fn(h, ctypes.byref(reasons))
    nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(temp))
    out.write("%.4f,%d,%d,%d,%d\n" % (time.time(), mhz.value, mw.value, reasons.value, temp.value))
    time.sleep(a.every_ms / 1e3)
out.flush()
