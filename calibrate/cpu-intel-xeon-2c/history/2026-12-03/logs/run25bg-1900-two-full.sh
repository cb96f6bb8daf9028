#!/usr/bin/env bash
# issue 25: two more full calibrations at bfeaed2 (shape classes, fresh-page prior, the 24,704 head), each validated on
# the HF family and repriced on the other's report. 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for f in f1 f2; do
  P full $f; /usr/bin/time -f "wall %e s" python3 ../capq.py $f calibrate --budget 360 --dtype fp32 --out $f.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
  P validate-$f; rooflinesim validate --profile $f.yaml --family hf --dtype fp32 --out-dir v$f --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
done
P reprice; for f in f1 f2; do python3 /work/main/scripts/reprice-holdout.py v$f/*.json f1.yaml f2.yaml ../r13/f1.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'; done
P done
