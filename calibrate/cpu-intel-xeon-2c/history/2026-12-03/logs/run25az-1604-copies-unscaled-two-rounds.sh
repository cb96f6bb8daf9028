#!/usr/bin/env bash
# issue 25: two more rounds with a3677bf: three fp32 quick runs, validated on the HF family, three bf16 quick runs,
# validated; 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for r in a b; do
  for d in fp32 bf16; do
    if [ $d = fp32 ]; then p=q; else p=b; fi
    for i in 1 2 3; do
      P $d quick $r$p$i; /usr/bin/time -f "wall %e s" python3 ../capq.py $r$p$i calibrate --quick --dtype $d --out $r$p$i.yaml --no-progress 2>&1 | grep -E "wrote|$d:|timed again|wall"
    done
    P validate $r $d; rooflinesim validate --profile ${r}${p}1.yaml --family hf --dtype $d --out-dir v$r$d --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
    P reprice; python3 /work/main/scripts/reprice-holdout.py v$r$d/*.json $r${p}1.yaml $r${p}2.yaml $r${p}3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
  done
done
P done
