#!/usr/bin/env bash
# issue 25: the committed plan with one untimed turn before each fresh-page concat point: three quick calibrations + hold-out, then full + validate + --model, 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd <work>/w4j
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | tail -4
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf,gptfast,project --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ |machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | tail -6
cd <work>/w6j
P full; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
P validate-full; rooflinesim validate --profile full.yaml --family hf,gptfast,project --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | tail -22
P model; rooflinesim calibrate --model <work>/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -15
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | tail -12
P done
