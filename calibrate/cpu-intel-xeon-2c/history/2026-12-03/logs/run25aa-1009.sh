#!/usr/bin/env bash
# issue 25: calibrate --model hf-llama-94m with terms on the hf implementation profile (no engine) and the
# mean leave-one-out selection, three times on the 10:01 full profile, each validated; 2-core Intel Xeon VM, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd /work/meas/y/m1
for i in 1 2 3; do
  P model $i; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile ../f1/a/full.yaml --out model$i.yaml --dtype fp32 --no-progress 2>&1 | tail -15
  P validate-model $i; rooflinesim validate --profile model$i.yaml --family model --dtype fp32 --out-dir vmodel$i --no-plot --no-progress 2>&1 | grep -E "│ model|machine|x 1"
done
P done
