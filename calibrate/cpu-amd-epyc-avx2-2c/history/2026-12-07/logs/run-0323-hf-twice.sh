#!/usr/bin/env bash
# Measurement noise of the HF family: measured twice more against q1 (stable code at 6a2d97e via PYTHONPATH).
set -u
export PYTHONPATH=/tmp/stable
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
for i in 2 3; do
  P family-q1-r$i; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1r$i --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 0|x 1"
done
P done
