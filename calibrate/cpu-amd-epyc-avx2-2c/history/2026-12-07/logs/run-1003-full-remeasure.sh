#!/usr/bin/env bash
# right after the 09:55 quick round: a full fp32 profile against the HF family measured twice (--remeasure), and
# `calibrate --model hf-llama-94m` on it, its untimed points measured twice by `validate --family model --remeasure`
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
cd /tmp/rf
python3 - <<'PY'
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config
make_config(get_hf_hold_out("hf-llama-94m")).save_pretrained("hf-llama-94m")
PY
P full-fp32; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full-fp32.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|wall|drift|expected"
P family-full-fp32; rooflinesim validate --profile full-fp32.yaml --family hf --dtype fp32 --out-dir vf32 --no-plot --no-progress --remeasure 2>&1 | grep -vE "━|┏|┃|┡|└"
P model; rooflinesim calibrate --model hf-llama-94m --profile full-fp32.yaml --out m1.yaml --dtype fp32 --no-progress 2>&1 | tail -8
P validate-model; rooflinesim validate --profile m1.yaml --family model --dtype fp32 --out-dir vm1 --no-plot --no-progress --remeasure 2>&1 | grep -vE "━|┏|┃|┡|└"
P done
