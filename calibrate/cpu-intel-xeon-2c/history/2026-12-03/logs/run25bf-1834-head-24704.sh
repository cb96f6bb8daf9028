#!/usr/bin/env bash
# issue 25: a round with the 24,704-wide head in the plans (67d1808, fc1f20a): fp32 quick round, one full calibration,
# bf16 quick round, each validated on the HF family. 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall"
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P full f1; /usr/bin/time -f "wall %e s" python3 ../capq.py f1 calibrate --budget 360 --dtype fp32 --out f1.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
P validate-f1; rooflinesim validate --profile f1.yaml --family hf --dtype fp32 --out-dir vf1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vf1/*.json f1.yaml q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
for i in 1 2 3; do
  P bf16 quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py b$i calibrate --quick --dtype bf16 --out b$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
done
P validate-b1; rooflinesim validate --profile b1.yaml --family hf --dtype bf16 --out-dir vb1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vb1/*.json b1.yaml b2.yaml b3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P done
