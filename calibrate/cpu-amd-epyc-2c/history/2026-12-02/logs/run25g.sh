#!/usr/bin/env bash
# Full calibration, its HF hold-out and calibrate --model, in a quiet window (issue 25). Output in /work/meas/w6.
set -u
cd /work/meas/w6
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
P full; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
P validate-full; rooflinesim validate --profile full.yaml --family hf,gptfast,project --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | tail -22
P model; rooflinesim calibrate --model /work/meas/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -15
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | tail -12
P done
