#!/usr/bin/env bash
# Three quick fp32 calibrations with segments rescaled to the run's fast state (drift.rescale_slow_segments, working
# tree), repriced on the HF measurement sets of 03:19 (fast state) and 03:23 (slow), then one fresh HF measurement.
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
for i in 1 2 3; do
  P quick n$i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype fp32 --out n$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|wall|drift|expected"
done
P reprice
for v in vq1 vq1r2; do python3 /work/main/scripts/reprice-holdout.py $v/*.json n1.yaml n2.yaml n3.yaml q1.yaml q2.yaml q3.yaml 2>&1 | grep -v "^ " | grep -v "as reference"; done
P family-n1; rooflinesim validate --profile n1.yaml --family hf --dtype fp32 --out-dir vn1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 0|x 1"
P done
