#!/usr/bin/env bash
# issue 25 on the 2-core AMD EPYC VM without AVX-512 (Zen 3, AVX2), 2026-12-07 (second session): three quick fp32 calibrations in a
# row, the three families measured once against q1 and repriced with q2 / q3 (spread), then `calibrate --model` on
# hf-llama-94m against the script's full profile, re-measured by `validate --family model`.
set -u
P() { echo "== $(date -u +%H:%M:%S) $* | $(head -1 /proc/pressure/cpu) | load $(cut -d' ' -f1 /proc/loadavg)"; }
cd "$(dirname "$0")"
FULL=q1.yaml
python3 - <<'PY'
from rooflinesim.calibrate.external.hf_holdout import get_hf_hold_out, make_config
make_config(get_hf_hold_out("hf-llama-94m")).save_pretrained("hf-llama-94m")
PY
for i in 1 2 3; do
  P quick q$i; /usr/bin/time -f "wall %e s" rooflinesim calibrate --quick --dtype fp32 --out q$i.yaml --no-progress 2>&1 | grep -E "wrote|fp32:|wall|drift|expected"
done
P family-q1; rooflinesim validate --profile q1.yaml --family hf,gptfast,project --dtype fp32 --out-dir vq1 --no-plot --no-progress 2>&1 | grep -E "│ (hf|gptfast|project) |machine|x 0|x 1"
P reprice; python3 /work/main/scripts/reprice-holdout.py vq1/*.json q1.yaml q2.yaml q3.yaml "$FULL" 2>&1 | grep -v "^ "
for i in 1; do
  P model $i; rooflinesim calibrate --model hf-llama-94m --profile "$FULL" --out m$i.yaml --dtype fp32 --no-progress 2>&1 | tail -6
  P validate-model $i; rooflinesim validate --profile m$i.yaml --family model --dtype fp32 --out-dir vm$i --no-plot --no-progress 2>&1 | grep -E "│|machine"
done
P done
