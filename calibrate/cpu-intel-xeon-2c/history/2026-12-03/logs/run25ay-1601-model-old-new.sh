#!/usr/bin/env bash
# issue 25: `calibrate --model` on hf-llama-94m over the 15:50 full profile, with a3677bf (new) and its parent (old,
# a worktree on PYTHONPATH), alternating; each validated on the model's untimed points. 2-core Intel Xeon VM
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu)"; }
cd "$(dirname "$0")"
for i in 1 2; do
  for v in new old; do
    if [ $v = old ]; then export PYTHONPATH=$PWD/old/wt; else unset PYTHONPATH; fi
    P model $v $i; python3 -m rooflinesim.cli calibrate --model /work/meas/x/w2/hf-llama-94m --profile full.yaml --out m-$v$i.yaml --dtype fp32 --no-progress 2>&1 | grep -E "check|timed|wrote"
    P validate $v $i; python3 -m rooflinesim.cli validate --profile m-$v$i.yaml --family model --dtype fp32 --out-dir v-$v$i --no-plot --no-progress 2>&1 | grep -E "│ model|machine"
  done
done
unset PYTHONPATH
P done
