#!/bin/bash
# Work queued on the GPU behind a stream wait (cuStreamWaitValue32 on pinned host memory), with
# a 50 us and a 1.6 ms loop beside it (no gpushare).
bench/gate_probe/run.sh /tmp/gp 2>&1
