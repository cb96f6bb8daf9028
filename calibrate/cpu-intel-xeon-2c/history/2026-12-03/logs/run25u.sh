#!/usr/bin/env bash
# issue 25: two more full calibrations (0bd8539) with 990953d (the turn over the copies), each validated on the HF family, to compare the fresh-page rules; 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
for w in w6m w6n; do
  cd <work>/$w
  P full $w; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | tail -4
  P validate-hf $w; rooflinesim validate --profile full.yaml --family hf --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ hf |machine"
done
P done
