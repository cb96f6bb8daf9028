#!/usr/bin/env bash
# issue 25: three quick calibrations, block-768-16l in the quick plan and one untimed turn before each fresh-page concat point, 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd <work>/w4i
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | tail -4
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf,gptfast,project --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ |machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | tail -6
P done
