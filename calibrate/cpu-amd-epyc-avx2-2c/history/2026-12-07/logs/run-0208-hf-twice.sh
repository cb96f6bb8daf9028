#!/usr/bin/env bash
# How much of the Zen 3 VM's spread is the measuring side? The HF family validated twice more against the
# script's full profile (its first validation: 01:18, HF median 24.6 %), the anchors reported by each.
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
cd "$(dirname "$0")"
FULL=/work/main/calibrate/cpu-amd-epyc-avx2-2c/cpu-amd-epyc-avx2-2c.yaml
for i in 1 2; do
  P validate-hf $i; rooflinesim validate --profile "$FULL" --family hf --dtype fp32 --out-dir v$i --no-plot --no-progress 2>&1 | grep -E "│ (hf|  hf)|machine|x 0|x 1"
done
P done
