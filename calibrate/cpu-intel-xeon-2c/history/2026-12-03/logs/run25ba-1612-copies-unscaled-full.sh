#!/usr/bin/env bash
# issue 25: a second full calibration with a3677bf, validated on the HF family, `calibrate --model` on it, validated;
# 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
P full; /usr/bin/time -f "wall %e s" python3 ../capq.py full calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
P validate-full; rooflinesim validate --profile full.yaml --family hf --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -8
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | grep -E "│|machine"
P done
