#!/usr/bin/env bash
# issue 25: two full calibrations with 4270994 + 09d6b0e, each validated on the HF family, then calibrate --model on
# the first; 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
for w in a b; do
  mkdir -p /work/meas/y/f1/$w; cd /work/meas/y/f1/$w
  P full $w; /usr/bin/time -f "wall %e s" python3 /work/meas/y/capq.py full calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
  P validate-hf $w; rooflinesim validate --profile full.yaml --family hf --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ hf |machine|x 1"
done
cd /work/meas/y/f1/a
P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -15
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | tail -12
P done
