#!/bin/bash
# where a loop of 50 us kernels synchronizing after each loses its rate when it shares the GPU:
# resume_cost.py without gpushare (no pause, 20 ms pauses asleep, 20 ms pauses spinning, beside a
# process that holds a context and launches nothing), then the 50 us cell synchronizing after each
# kernel under gpushared (the build in .devbase/new) in a pair, alone, and time-sliced
set -u
B=$PWD/.devbase; N=$B/new; W=$OUT
for f in $B/*/*.xz; do [ -e "${f%.xz}" ] || xz -dk "$f"; chmod +x "${f%.xz}"; done
nvidia-smi -L > $W/gpu.txt; cp $N/commit.txt $W/commit.txt
{ lscpu; cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor; grep . /sys/devices/system/cpu/cpu0/cpuidle/state*/name /sys/devices/system/cpu/cpu0/cpuidle/state*/latency; } > $W/cpu.txt 2>&1
R=bench/share/resume_cost.py
for p in none sleep spin none sleep spin; do python3 $R --pause $p --seconds 6 >> $W/resume.jsonl; done
python3 -c "import torch,time; torch.zeros(1,device='cuda'); torch.cuda.synchronize(); time.sleep(12)" &
sleep 5; python3 $R --pause none --seconds 5 --label beside_idle_context >> $W/resume.jsonl; wait
TARGET=$N NAME=cell CELLS="50us:1" ALONE_CELLS="50us:1" TIMESLICE_CELLS="50us:1" QUAD_CELLS="" TRANSFORMER="" BUDGET=300 bench/share/sweep.sh $W > $W/cell.log 2>&1
