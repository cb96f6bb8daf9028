#!/usr/bin/env bash
# issue 25: quick calibrations with the raw results kept, for refits offline; 2-core Intel Xeon VM, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y
for i in 1 2 3 4; do
  P quick $i; python3 capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | tail -3
done
P done
