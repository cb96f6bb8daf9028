#!/usr/bin/env bash
# issue 25 at 908374a: three quick calibrations per dtype with the HF family against q1 (fp32, then bf16), a full
# fp32 calibration with the HF report, calibrate --model and its validation; 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/g
for d in fp32 bf16; do
  for i in 1 2 3; do
    P quick $d $i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype $d --out $d-q$i.yaml --no-progress 2>&1 | tail -4
  done
  P validate-q1 $d; rooflinesim validate --profile $d-q1.yaml --family hf --dtype $d --out-dir v$d --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
  P reprice $d; python3 /work/main/scripts/reprice-holdout.py v$d/*.json $d-q1.yaml $d-q2.yaml $d-q3.yaml 2>&1 | tail -4
done
P full; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
P validate-full; rooflinesim validate --profile full.yaml --family hf --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -15
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | grep -E "│ model|machine|x 1"
P done
