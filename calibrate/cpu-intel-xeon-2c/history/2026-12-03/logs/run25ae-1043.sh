#!/usr/bin/env bash
# issue 25: the tiny decoders' linear shapes in every plan: three quick calibrations per dtype and the HF family
# against each q1 (bf16, then fp32); 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/t1
for d in bf16 fp32; do
  for i in 1 2 3; do
    P quick $d $i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype $d --out $d-q$i.yaml --no-progress 2>&1 | tail -4
  done
  P validate-q1 $d; rooflinesim validate --profile $d-q1.yaml --family hf --dtype $d --out-dir v$d --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
  P reprice $d; python3 /work/main/scripts/reprice-holdout.py v$d/*.json $d-q1.yaml $d-q2.yaml $d-q3.yaml 2>&1 | tail -4
done
P done
