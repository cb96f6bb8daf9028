#!/usr/bin/env bash
# issue 25: `calibrate --model` on hf-llama-94m against the 20:29 full profile (e4b0443), twice, each re-measured by
# `validate --family model`; then one full fp32 calibration at 52d569c validated on the HF family. 2-core Intel Xeon
# VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2; do
  P model $i; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile f1.yaml --out m$i.yaml --dtype fp32 --no-progress 2>&1 | tail -8
  P validate-model $i; rooflinesim validate --profile m$i.yaml --family model --dtype fp32 --out-dir vm$i --no-plot --no-progress 2>&1 | grep -E "│|machine"
done
P full f2; /usr/bin/time -f "wall %e s" python3 ../capq.py f2 calibrate --budget 360 --dtype fp32 --out f2.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
P validate-f2; rooflinesim validate --profile f2.yaml --family hf --dtype fp32 --out-dir vf2 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; for v in vf2 ../r19/vf1 ../r19/vq1; do echo "-- $v"; python3 /work/main/scripts/reprice-holdout.py $v/*.json f2.yaml f1.yaml ../r19/q1.yaml ../r19/q2.yaml ../r19/q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'; done
P done
