#!/usr/bin/env bash
# issue 25: three quick fp32 runs with three builds per mid-size decoder (40374cf, uncommitted then), the HF family
# against q1, repriced (also with the 13:28 profiles); 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/s
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall"
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1|family"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml ../r/q1.yaml ../r/q2.yaml ../r/q3.yaml ../r/full.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P done
