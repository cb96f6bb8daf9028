#!/usr/bin/env bash
# The prepared GPU run (issues 4 and 25), under 8 minutes on a CUDA machine: a quick calibration (bf16), the hold-outs
# written outside the project (Hugging Face transformers models over their own DynamicCache, the gpt-fast-style
# decoder, beside the project's own family: `validate --family`), then the measured serving loop (`validate
# --serve`). Everything lands in $OUT (default: calibrate/<device-slug>/), with one log per step and the wall time of each.
#
# Made for a borrowed machine whose python3 already holds a CUDA build of torch: it installs nothing over the
# network and runs the package from the checkout (PYTHONPATH). Packages missing there (pydantic, transformers and
# its dependencies) can be carried as wheels in .whl/ and are installed into /tmp/site first; without transformers
# the HF family is left out and the log says so.
#
#   OUT=/some/dir bash scripts/gpu-run.sh               # on the GPU machine
#   OUT=/tmp/dry bash scripts/gpu-run.sh --cpu-dry-run  # here: the same steps on the CPU, smoke-sized
#
# Each step runs under `timeout` with its share of the 8-minute budget (calibrate 100 s, hold-outs 200 s, serving
# loop 150 s; the rest is start-up), so a slow step is cut and the next one still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [[ "${1:-}" == "--cpu-dry-run" ]]; then DRY=1; elif [[ $# -gt 0 ]]; then
    echo "usage: bash scripts/gpu-run.sh [--cpu-dry-run]" >&2; exit 2
fi
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [[ $DRY == 1 ]]; then
    DEVICE=cpu DTYPE=fp32 FAMILY_SIZE=--tiny SERVE_ARGS=(--requests 6 --load 0.3)
    T_CAL=120 T_FAMILY=300 T_SERVE=300
else
    DEVICE=cuda DTYPE=bf16 FAMILY_SIZE=--quick SERVE_ARGS=()
    T_CAL=100 T_FAMILY=200 T_SERVE=150
    python3 - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))
PY
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
fi
FAMILIES=gptfast,project
if python3 -c "import transformers" 2>/dev/null; then FAMILIES=hf,$FAMILIES; else
    echo "gpu-run: transformers is not importable: the HF hold-out is left out (carry its wheels in .whl/)"
fi
NAME=$(python3 -c "from rooflinesim.calibrate.measure.timers import select_device; print(select_device('$DEVICE').slug)")
OUT=${OUT:-calibrate/$NAME}
mkdir -p "$OUT"
PROFILE="$OUT/$NAME-quick.yaml"
START=$SECONDS
step() {  # step NAME SECONDS COMMAND...: run with a timeout, log, and report its wall time; a failure is reported
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS rc=0
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
    echo "gpu-run: $name took $((SECONDS - t0)) s (limit $limit s), exit $rc" | tee -a "$OUT/$name.log"
}
step calibrate "$T_CAL" python3 -m rooflinesim.cli calibrate --device "$DEVICE" --dtype "$DTYPE" --quick \
    --no-progress --out "$PROFILE"
[[ -f "$PROFILE" ]] || { echo "gpu-run: no profile written; stopping" >&2; exit 1; }
step holdout "$T_FAMILY" python3 -m rooflinesim.cli validate --family "$FAMILIES" $FAMILY_SIZE --device "$DEVICE" \
    --dtype "$DTYPE" --profile "$PROFILE" --out-dir "$OUT" --no-progress
step serve "$T_SERVE" python3 -m rooflinesim.cli validate --serve --device "$DEVICE" --dtype "$DTYPE" \
    --profile "$PROFILE" --out-dir "$OUT" --no-progress --no-plot "${SERVE_ARGS[@]}"
echo "gpu-run: total $((SECONDS - START)) s (goal < 480 s on the GPU)"
ls -l "$OUT"
