#!/usr/bin/env bash
# issue 25 at 29f51cd: three quick calibrations + the three families against q1, then a full calibration, its HF and
# project reports, calibrate --model hf-llama-94m and its validation; 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/final
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | tail -4
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf,gptfast,project --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ |machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | tail -6
P full; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
P validate-full; rooflinesim validate --profile full.yaml --family hf,gptfast,project --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ |machine|x 1"
P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -15
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | grep -E "│ model|machine|x 1"
P done
