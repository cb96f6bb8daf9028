#!/usr/bin/env bash
# issue 25: bf16 quick, the steady rung's mid-size decoders as shipped (b*) and with block-768-16l for block-768 (d*),
# interleaved; validated on the HF family. 2-core Intel Xeon VM with AMX
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2 3; do
  P bf16 quick b$i; /usr/bin/time -f "wall %e s" python3 ../capx.py b$i calibrate --quick --dtype bf16 --out b$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
  P bf16 quick d$i; BLOCKS=block-768-16l,block-1536 /usr/bin/time -f "wall %e s" python3 ../capx.py d$i calibrate --quick --dtype bf16 --out d$i.yaml --no-progress 2>&1 | grep -E "wrote|bf16:|timed again|wall"
done
P validate; rooflinesim validate --profile b1.yaml --family hf --dtype bf16 --out-dir vb1 --no-plot --no-progress 2>&1 | grep -E "│ hf|machine|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vb1/*.json b1.yaml b2.yaml b3.yaml d1.yaml d2.yaml d3.yaml 2>&1 | grep yaml: | sed 's/hf (as reference)[^,]*, //'
P done
