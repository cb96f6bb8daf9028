#!/usr/bin/env bash
# issue 25: a full bf16 calibration at f80ddbf beside r19's bf16 quick profiles, validated on the HF family, to tell
# what the bf16 quick fits' scale (1.17-1.29) makes up for. 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
P full bf16; /usr/bin/time -f "wall %e s" python3 ../capq.py f1 calibrate --budget 360 --dtype bf16 --out f1.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall|drift|^calibrate"
P validate-f1; rooflinesim validate --profile f1.yaml --family hf --dtype bf16 --out-dir vf1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; for v in vf1 ../r19/vb1; do echo "-- $v"; python3 /work/main/scripts/reprice-holdout.py $v/*.json f1.yaml ../r19/b1.yaml ../r19/b2.yaml ../r19/b3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'; done
P done
