#!/usr/bin/env bash
# issue 25: shape classes (c7d4e5c): fp32 quick round, full, --model, bf16 quick round, three families
# 2-core Intel Xeon VM with AMX, 2026-12-03
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2 3; do
  P quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py q$i calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall"
done
P validate-q1; rooflinesim validate --profile q1.yaml --family hf --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P full; /usr/bin/time -f "wall %e s" python3 ../capq.py full calibrate --budget 360 --dtype fp32 --out full.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|timed again|wall|drift|^calibrate"
P validate-full; rooflinesim validate --profile full.yaml --family hf --dtype fp32 --out-dir vfull --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vfull/*.json full.yaml q1.yaml q2.yaml q3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P model; rooflinesim calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out full-model.yaml --dtype fp32 --no-progress 2>&1 | tail -8
P validate-model; rooflinesim validate --profile full-model.yaml --family model --dtype fp32 --out-dir vmodel --no-plot --no-progress 2>&1 | grep -E "│|machine"
for i in 1 2 3; do
  P bf16 quick $i; /usr/bin/time -f "wall %e s" python3 ../capq.py b$i calibrate --quick --dtype bf16 --out b$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
done
P validate-b1; rooflinesim validate --profile b1.yaml --family hf --dtype bf16 --out-dir vb1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vb1/*.json b1.yaml b2.yaml b3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P families; rooflinesim validate --profile q2.yaml --family hf,gptfast,project --quick --dtype fp32 --out-dir vfam --no-plot --no-progress 2>&1 | grep -E "│ (hf|gpt|proj)|machine"
P reprice; python3 /work/main/scripts/reprice-holdout.py vfam/*.json q1.yaml q2.yaml q3.yaml full.yaml 2>&1 | grep yaml: | sed -e 's/hf (as reference)[^,]*, //' -e 's/gptfast (as reference)[^,]*, //'
P done
