#!/usr/bin/env bash
# issue 25: a second round with the shape classes (c7d4e5c): fp32 quick round, two full calibrations (--model on the
# first), bf16 quick round, each validated on the HF family. 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall"
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
for f in f1 f2; do
  P full $f; /usr/bin/time -f "wall %e s" python3 ../capq.py $f calibrate --budget 360 --dtype fp32 --out $f.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
  P validate-$f; rooflinesim validate --profile $f.yaml --family hf --dtype fp32 --out-dir v$f --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
  P reprice; python3 /work/main/scripts/reprice-holdout.py v$f/*.json f1.yaml q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
  if [ $f = f1 ]; then
    P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile f1.yaml --out f1-model.yaml --dtype fp32 --no-progress 2>&1 | tail -8
    P validate-model; rooflinesim validate --profile f1-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | grep -E "│|machine"
  fi
done
for i in 1 2 3; do
  P bf16 quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py b$i calibrate --quick --dtype bf16 --out b$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
done
P validate-b1; rooflinesim validate --profile b1.yaml --family hf --dtype bf16 --out-dir vb1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vb1/*.json b1.yaml b2.yaml b3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P done
