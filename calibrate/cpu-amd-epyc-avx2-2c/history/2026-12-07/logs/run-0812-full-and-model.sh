#!/usr/bin/env bash
# issue 25 on the 2-core AMD EPYC VM without AVX-512 (Zen 3), right after the quick spread: a full fp32 profile with
# the three families against it, the three families in bf16 against the full bf16 profile of 08:06, and
# `calibrate --model hf-llama-94m` on the full fp32 profile re-measured by `validate --family model`
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
cd /tmp/z4
python3 - <<'PY'
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config
make_config(get_hf_hold_out("hf-llama-94m")).save_pretrained("hf-llama-94m")
PY
P full-fp32; /usr/bin/time -f "wall %e s" rooflinesim calibrate --budget 360 --dtype fp32 --out full-fp32.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|wall|drift|expected"
P family-full-fp32; rooflinesim validate --profile full-fp32.yaml --family hf,gptfast,project --dtype fp32 --out-dir vf32 --no-plot --no-progress 2>&1 | grep -E "│ (hf|gptfast|project) |machine|x 0|x 1|wall"
P family-full-bf16; rooflinesim validate --profile full-bf16.yaml --family hf,gptfast,project --dtype bf16 --out-dir vf16 --no-plot --no-progress 2>&1 | grep -E "│ (hf|gptfast|project) |machine|x 0|x 1"
P model; rooflinesim calibrate --model hf-llama-94m --profile full-fp32.yaml --out m1.yaml --dtype fp32 --no-progress 2>&1 | tail -6
P validate-model; rooflinesim validate --profile m1.yaml --family model --dtype fp32 --out-dir vm1 --no-plot --no-progress 2>&1 | grep -E "│|machine"
P done
