#!/usr/bin/env bash
# issue 25: cold rotation (each cold-weight point starts where the last one stopped reading the pool; uncommitted, on
# 31f266e): fp32 and bf16 quick rounds validated on the HF family; r16's profiles repriced beside them. 2-core Intel
# Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall"
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; for v in vq1 ../r16/vq1 ../r16/vf1; do echo "-- $v"; python3 /work/main/scripts/reprice-holdout.py $v/*.json q1.yaml q2.yaml q3.yaml ../r16/q1.yaml ../r16/q2.yaml ../r16/q3.yaml ../r16/f1.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'; done
for i in 1 2 3; do
  P bf16 quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py b$i calibrate --quick --dtype bf16 --out b$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
done
P validate-b1; rooflinesim validate --profile b1.yaml --family hf --dtype bf16 --out-dir vb1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; for v in vb1 ../r16/vb1; do echo "-- $v"; python3 /work/main/scripts/reprice-holdout.py $v/*.json b1.yaml b2.yaml b3.yaml ../r16/b1.yaml ../r16/b2.yaml ../r16/b3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'; done
P done
