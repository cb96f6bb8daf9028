#!/usr/bin/env bash
# issue 25 at 6edf7a5, bf16: three quick calibrations and the HF family against q1; 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/b1
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype bf16 --out q$i.yaml --no-progress 2>&1 | tail -4
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype bf16 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py --per-model vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | tail -18
P done
