#!/usr/bin/env bash
# issue 25: quick calibrations, shipped (b*, q*: three-pass cache points, block-768 + block-1536) against cache points
# timed >= 0.15 s with block-768-16l for block-768 (n*, m*), interleaved, bf16 then fp32; each dtype validated on
# the HF family. 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for d in bf16 fp32; do
  if [ $d = bf16 ]; then o=b; n=n; else o=q; n=m; fi
  for i in 1 2 3; do
    P $d quick $o$i old; OLDCACHE=1 /usr/bin/time -f "wall %e s" python3 ../capx.py $o$i calibrate --quick --dtype $d --out $o$i.yaml --no-progress 2>&1 | grep -E "wrote|$d:|timed again|wall"
    P $d quick $n$i new; BLOCKS=block-768-16l,block-1536 /usr/bin/time -f "wall %e s" python3 ../capx.py $n$i calibrate --quick --dtype $d --out $n$i.yaml --no-progress 2>&1 | grep -E "wrote|$d:|timed again|wall"
  done
  P validate $d; rooflinesim validate --profile ${n}1.yaml --family hf --dtype $d --out-dir v$d --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
  P reprice; python3 /work/main/scripts/reprice-holdout.py v$d/*.json $o?.yaml $n?.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
done
P done
